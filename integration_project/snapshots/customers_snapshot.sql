{#-- (i) A snapshot on Parquet (type 2 history of raw_customers): dbt's snapshot merge run by
     the engine, with hard_deletes='new_record' — a customer missing from a batch gets its
     current version closed and a current deletion record (dbt_is_deleted = 'True'); one that
     comes back gets a new version. --#}
{% snapshot customers_snapshot %}
{{ config(
    unique_key='id',
    strategy='timestamp',
    updated_at='updated_at',
    hard_deletes='new_record',
) }}

select
    cast(id as bigint) as id,
    name,
    email,
    tier,
    cast(updated_at as timestamp) as updated_at
from {{ ref('raw_customers') }}
where batch = {{ var('batch') }}

{% endsnapshot %}
