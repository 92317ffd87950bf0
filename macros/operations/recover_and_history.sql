{#-- dbt run-operation rowmerge_recover --args '{relation: analytics.orders}' --#}
{% macro rowmerge_recover(relation) %}
  {%- set done = adapter.rowmerge_recover(relation) -%}
  {{ log("rowmerge_recover " ~ relation ~ ": " ~ done.message, info=True) }}
  {{ return(done) }}
{% endmacro %}


{#-- dbt run-operation rowmerge_rebind --args '{relation: analytics.orders}'
     after `ALTER TABLE ... RENAME TO analytics.orders`: the journal then names the new table --#}
{% macro rowmerge_rebind(relation) %}
  {%- set done = adapter.rowmerge_rebind(relation) -%}
  {{ log("rowmerge_rebind " ~ relation ~ ": " ~ done.message, info=True) }}
  {{ return(done) }}
{% endmacro %}


{#-- dbt run-operation rowmerge_history --args '{relation: analytics.orders, limit: 10}' --#}
{% macro rowmerge_history(relation, limit=none) %}
  {%- set rows = adapter.rowmerge_history(relation, limit) -%}
  {{ log("version | timestamp | operation | inserted | updated | deleted | files added | files removed", info=True) }}
  {%- for r in rows -%}
    {{ log(r.version ~ " | " ~ r.timestamp ~ " | " ~ r.operation ~ " | " ~ r.rows_inserted ~ " | " ~ r.rows_updated ~ " | " ~ r.rows_deleted ~ " | " ~ r.files_added ~ " | " ~ r.files_removed, info=True) }}
  {%- endfor -%}
  {{ return(rows) }}
{% endmacro %}
