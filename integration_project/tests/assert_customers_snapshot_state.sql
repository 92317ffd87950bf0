-- customers_snapshot holds exactly the versions expected after var('batch'): which are
-- current and which are deletion records (EXCEPT ALL both ways; empty when they agree).
with actual as (
    select id, name, tier, updated_at, dbt_valid_to is null as is_current, dbt_is_deleted = 'True' as is_deleted
    from {{ ref('customers_snapshot') }}
),

expected as (
    select cast(id as bigint) as id, name, tier, updated_at, is_current, is_deleted
    from {{ ref('expected_customers_snapshot') }}
    where batch = {{ var('batch') }}
),

missing as (select * from expected except all select * from actual),
unexpected as (select * from actual except all select * from expected)

select 'expected but missing' as diff, * from missing
union all
select 'in snapshot but not expected' as diff, * from unexpected
