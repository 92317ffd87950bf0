-- (c) Mirror of a full snapshot, composite key: target rows missing from this batch's
-- snapshot are deleted (WHEN NOT MATCHED BY SOURCE THEN DELETE).
{{ config(
    unique_key=['sku', 'warehouse'],
    not_matched_by_source_action='delete',
) }}

select
    sku,
    warehouse,
    cast(qty as int) as qty
from {{ ref('raw_inventory_snapshots') }}
where batch = {{ var('batch') }}
