{#-- The order-change feed of var('batch'), latest change per order. On the first run
     (table creation) deletes are dropped and `op` is left out of the table. --#}
{% macro latest_order_changes() %}
with changes as (
    select
        *,
        row_number() over (partition by order_id order by changed_at desc) as change_rank
    from {{ ref('raw_order_changes') }}
    where batch = {{ var('batch') }}
)

select
    cast(order_id as bigint) as order_id,
    cast(customer_id as bigint) as customer_id,
    status,
    cast(amount as decimal(10, 2)) as amount,
    cast(changed_at as timestamp) as updated_at
    {%- if is_incremental() %},
    op
    {%- endif %}
from changes
where change_rank = 1
{%- if not is_incremental() %}
  and op <> 'D'
{%- endif %}
{% endmacro %}
