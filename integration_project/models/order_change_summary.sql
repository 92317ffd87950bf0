-- (i) Downstream of a change feed: what every merge into orders_cdc changed, per commit
-- version and change type (rows and amount), read with table_changes() from version 1 on.
-- Rebuilt as a plain table each run; empty after the first run (version 0 has no changes).
{{ config(materialized='table') }}

select
    _commit_version as commit_version,
    _change_type as change_type,
    count(*) as row_count,
    cast(sum(amount) as decimal(12, 2)) as amount
from {{ table_changes(ref('orders_cdc'), 1) }} as changes
group by _commit_version, _change_type
