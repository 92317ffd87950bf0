{#--
  Rows where `model` and the rows of `expected` for var('batch') differ, in both
  directions (EXCEPT ALL, so duplicates count too), comparing every column of the model.
  `expected` must have exactly the model's columns plus `batch`; its values are cast to
  the model's column types. A singular test built on this passes when it returns no rows.
--#}
{% macro assert_matches_expected(model, expected) %}
  {%- set columns = [] -%}
  {%- if execute -%}
    {%- set columns = adapter.get_columns_in_relation(model) -%}
    {%- set model_names = columns | map(attribute='name') | map('lower') | sort -%}
    {%- set expected_names = adapter.get_columns_in_relation(expected) | map(attribute='name')
          | map('lower') | reject('equalto', 'batch') | sort -%}
    {%- if model_names != expected_names -%}
      {%- do exceptions.raise_compiler_error(
            model ~ " has columns " ~ (model_names | join(', ')) ~ " but " ~ expected
            ~ " expects " ~ (expected_names | join(', '))) -%}
    {%- endif -%}
  {%- endif -%}

with actual as (
    select
    {%- for c in columns %}
        `{{ c.name }}`{{ ',' if not loop.last }}
    {%- endfor %}
    from {{ model }}
),

expected as (
    select
    {%- for c in columns %}
        cast(`{{ c.name }}` as {{ c.data_type }}) as `{{ c.name }}`{{ ',' if not loop.last }}
    {%- endfor %}
    from {{ expected }}
    where batch = {{ var('batch') }}
),

missing as (
    select * from expected
    except all
    select * from actual
),

unexpected as (
    select * from actual
    except all
    select * from expected
)

select 'expected but missing' as diff, * from missing
union all
select 'in model but not expected' as diff, * from unexpected
{% endmacro %}
