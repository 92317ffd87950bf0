-- tickets_partitioned equals expected_tickets_partitioned for var('batch'), row for row.
{{ assert_matches_expected(ref('tickets_partitioned'), ref('expected_tickets_partitioned')) }}
