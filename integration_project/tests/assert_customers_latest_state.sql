-- customers_latest equals expected_customers_latest for var('batch'), row for row.
{{ assert_matches_expected(ref('customers_latest'), ref('expected_customers_latest')) }}
