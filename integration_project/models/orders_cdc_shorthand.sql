-- (b') The same CDC feed through the shorthand keys: delete_condition compiles to
-- `WHEN MATCHED AND op = 'D' THEN DELETE` plus `AND NOT (op = 'D')` on the insert.
-- Its expected state is the same as orders_cdc's.
{{ config(
    unique_key='order_id',
    delete_condition="DBT_INTERNAL_SOURCE.op = 'D'",
) }}

{{ latest_order_changes() }}
