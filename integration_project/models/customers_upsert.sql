-- (a) Plain upsert: unique_key only. Matched rows are updated with every column (`*`),
-- new keys are inserted; rows whose values did not change are not counted as updated.
{{ config(unique_key='id') }}

select
    cast(id as bigint) as id,
    name,
    email,
    tier,
    cast(updated_at as timestamp) as updated_at
from {{ ref('raw_customers') }}
where batch = {{ var('batch') }}
