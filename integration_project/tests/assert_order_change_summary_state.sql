-- order_change_summary (built from orders_cdc's change feed) equals
-- expected_order_change_summary for var('batch'): exact change rows per version and type.
{{ assert_matches_expected(ref('order_change_summary'), ref('expected_order_change_summary')) }}
