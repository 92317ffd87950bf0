-- Shorthand keys on an ORC table: a matched row is updated only when the source is newer
-- (matched_condition), and updates never touch first_seen_batch (merge_exclude_columns).
-- A stale matched row is neither updated nor inserted.
{{ config(
    file_format='orc',
    unique_key='id',
    matched_condition='DBT_INTERNAL_SOURCE.updated_at > DBT_INTERNAL_DEST.updated_at',
    merge_exclude_columns=['first_seen_batch'],
) }}

select
    cast(id as bigint) as id,
    name,
    email,
    tier,
    cast(updated_at as timestamp) as updated_at,
    cast({{ var('batch') }} as int) as first_seen_batch,
    cast({{ var('batch') }} as int) as last_loaded_batch
from {{ ref('raw_customers') }}
where batch = {{ var('batch') }}
