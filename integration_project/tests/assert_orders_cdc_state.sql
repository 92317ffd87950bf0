-- orders_cdc equals expected_orders for var('batch'), row for row.
{{ assert_matches_expected(ref('orders_cdc'), ref('expected_orders')) }}
