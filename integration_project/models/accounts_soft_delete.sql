-- (d) Soft delete: accounts missing from the snapshot get is_deleted = true (only once:
-- not_matched_by_source_condition), accounts present again get is_deleted = false back
-- through the matched update.
{{ config(
    unique_key='account_id',
    not_matched_by_source_action='update',
    not_matched_by_source_set={'is_deleted': 'true'},
    not_matched_by_source_condition='NOT DBT_INTERNAL_DEST.is_deleted',
) }}

select
    cast(account_id as bigint) as account_id,
    plan,
    cast(mrr as int) as mrr,
    false as is_deleted
from {{ ref('raw_account_snapshots') }}
where batch = {{ var('batch') }}
