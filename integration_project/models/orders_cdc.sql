-- (b) CDC with explicit merge_clauses: source rows carry op I/U/D. The latest change per
-- order in the batch wins. D deletes a matched order (and is ignored for an unknown one);
-- I/U update a matched order (explicit SET) or insert a new one.
-- `op` is only in the incremental source: `insert *` resolves by name and ignores it.
-- change_data_feed keeps orders_cdc__changes (read by order_change_summary).
{{ config(
    unique_key='order_id',
    change_data_feed=true,
    merge_clauses=[
        {'when': 'matched', 'condition': "DBT_INTERNAL_SOURCE.op = 'D'", 'action': 'delete'},
        {'when': 'matched', 'action': 'update', 'set': {
            'customer_id': 'DBT_INTERNAL_SOURCE.customer_id',
            'status': 'DBT_INTERNAL_SOURCE.status',
            'amount': 'DBT_INTERNAL_SOURCE.amount',
            'updated_at': 'DBT_INTERNAL_SOURCE.updated_at',
        }},
        {'when': 'not_matched', 'condition': "DBT_INTERNAL_SOURCE.op <> 'D'", 'action': 'insert', 'values': '*'},
    ],
) }}

{{ latest_order_changes() }}
