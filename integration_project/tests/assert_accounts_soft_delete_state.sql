-- accounts_soft_delete equals expected_accounts_soft_delete for var('batch'), row for row.
{{ assert_matches_expected(ref('accounts_soft_delete'), ref('expected_accounts_soft_delete')) }}
