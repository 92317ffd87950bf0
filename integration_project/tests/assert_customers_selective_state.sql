-- customers_selective equals expected_customers_selective for var('batch'), row for row.
{{ assert_matches_expected(ref('customers_selective'), ref('expected_customers_selective')) }}
