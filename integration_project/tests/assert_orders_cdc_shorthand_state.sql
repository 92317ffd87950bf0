-- orders_cdc_shorthand equals expected_orders for var('batch'), row for row.
{{ assert_matches_expected(ref('orders_cdc_shorthand'), ref('expected_orders')) }}
