-- inventory_mirror equals expected_inventory_mirror for var('batch'), row for row.
{{ assert_matches_expected(ref('inventory_mirror'), ref('expected_inventory_mirror')) }}
