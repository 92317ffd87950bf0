-- customers_upsert equals expected_customers_upsert for var('batch'), row for row.
{{ assert_matches_expected(ref('customers_upsert'), ref('expected_customers_upsert')) }}
