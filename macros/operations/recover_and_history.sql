{#-- dbt run-operation rowmerge_recover --args '{relation: analytics.orders}' --#}
{% macro rowmerge_recover(relation) %}
  {%- set replayed = adapter.rowmerge_recover(relation) -%}
  {%- if replayed -%}
    {{ log("rowmerge_recover " ~ relation ~ ": rolled forward version(s) " ~ (replayed | join(', ')), info=True) }}
  {%- else -%}
    {{ log("rowmerge_recover " ~ relation ~ ": nothing to recover", info=True) }}
  {%- endif -%}
  {{ return(replayed) }}
{% endmacro %}


{#-- dbt run-operation rowmerge_history --args '{relation: analytics.orders, limit: 10}' --#}
{% macro rowmerge_history(relation, limit=none) %}
  {%- set rows = adapter.rowmerge_history(relation, limit) -%}
  {{ log("version | timestamp | operation | inserted | updated | deleted | files added | files removed", info=True) }}
  {%- for r in rows -%}
    {%- set m = r.metrics -%}
    {{ log(r.version ~ " | " ~ r.timestamp ~ " | " ~ r.operation ~ " | " ~ m.get('numTargetRowsInserted', 0) ~ " | " ~ m.get('numTargetRowsUpdated', 0) ~ " | " ~ m.get('numTargetRowsDeleted', 0) ~ " | " ~ m.get('numTargetFilesAdded', 0) ~ " | " ~ m.get('numTargetFilesRemoved', 0), info=True) }}
  {%- endfor -%}
  {{ return(rows) }}
{% endmacro %}
