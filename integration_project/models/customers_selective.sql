-- More shorthand keys: updates set only tier and updated_at (merge_update_columns: a new
-- name or email is ignored), bronze customers are never inserted (not_matched_condition),
-- and a target-side incremental_predicates entry is ANDed into the merge `on`.
{{ config(
    unique_key='id',
    merge_update_columns=['tier', 'updated_at'],
    not_matched_condition="DBT_INTERNAL_SOURCE.tier <> 'bronze'",
    incremental_predicates=["DBT_INTERNAL_DEST.updated_at >= timestamp'2023-01-01 00:00:00'"],
) }}

select
    cast(id as bigint) as id,
    name,
    email,
    tier,
    cast(updated_at as timestamp) as updated_at
from {{ ref('raw_customers') }}
where batch = {{ var('batch') }}
