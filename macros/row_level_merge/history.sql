{#--
  Version 0 of a row_level_merge table: called right after dbt created it (first run) or
  rebuilt it (a view replaced, or a --full-refresh that changes what a Parquet/ORC table cannot
  alter in place: see rowmerge_replace). Earlier versions are forgotten and the change table,
  with change_data_feed, starts empty.
--#}
{% macro rowmerge_start_history(relation, operation, earlier_versions=0) %}
  {%- set changes = rowmerge_changes_table(model.config, relation) -%}
  {%- set started = adapter.rowmerge_start_history(relation.render(), operation, changes) -%}
  {#-- A journal that survived the drop (a table with its own location) is counted here. --#}
  {%- set earlier_versions = [earlier_versions, started.versions_forgotten] | max -%}
  {%- if operation == 'REPLACE TABLE' -%}
    {%- set feed = "" -%}
    {%- if changes -%}
      {%- set feed = "; change feed " ~ changes ~ " truncated (" ~ started.changes_rows_removed ~ " change rows removed)" -%}
    {%- endif -%}
    {#-- the adapter warned why (rowmerge_replace); the counts go to the debug log --#}
    {{ log("rowmerge: full refresh of " ~ relation.render() ~ ": history restarted at version 0 ("
           ~ earlier_versions ~ " earlier versions forgotten)" ~ feed, info=False) }}
  {%- endif -%}
  {{ return(started) }}
{% endmacro %}


{#--
  The change rows of a model with change_data_feed, from start_version on (and up to
  end_version), or committed from start_ts (to end_ts; inclusive, ISO 8601, UTC unless the
  text gives an offset), for use in downstream models:

    select * from {{ table_changes(ref('orders'), 5) }} as c
    select * from {{ table_changes(ref('orders'), start_ts='2026-11-26 00:00:00') }} as c

  Columns: the model's columns plus _change_type (insert, update_preimage,
  update_postimage, delete), _commit_version and _commit_timestamp. When the model compiles,
  the range is checked against the table's journal: a start past the latest version, or a
  range across a full refresh that wrote no change rows, fails naming the version (guard a
  consumer with rowmerge_latest_version). Under `dbt run --empty` it reads no rows.
--#}
{% macro table_changes(relation, start_version=none, end_version=none, start_ts=none, end_ts=none) %}
  {%- do adapter.rowmerge_check_versions(relation, start_version, end_version, start_ts, end_ts) -%}
  {%- set r = {'start': start_version if start_version is not none else 0, 'end': end_version, 'start_us': none, 'end_us': none} -%}
  {%- if execute and not flags.EMPTY -%}
    {%- set r = adapter.rowmerge_changes_range(relation.render(), start_version, end_version, start_ts, end_ts) -%}
  {%- endif -%}
  {#-- abs() (versions are never negative) keeps Spark from pushing the filter to a Hive
       metastore, whose filter grammar rejects names starting with `_`; Spark still prunes the
       _commit_version partitions itself. Timestamps compare as microseconds since the epoch,
       whatever the session's time zone. --#}
  (select * from {{ rowmerge_changes_relation(relation) }}
   {%- if flags.EMPTY %}
   where false
   {%- else %}
   where abs(_commit_version) >= {{ r['start'] }}
   {%- if r['end'] is not none %} and abs(_commit_version) <= {{ r['end'] }}{% endif %}
   {%- if r['start_us'] is not none %} and unix_micros(_commit_timestamp) >= {{ r['start_us'] }}{% endif %}
   {%- if r['end_us'] is not none %} and unix_micros(_commit_timestamp) <= {{ r['end_us'] }}{% endif %}
   {%- endif %})
{% endmacro %}


{#-- The newest version of a row_level_merge model's table (none before its first run), e.g.
     to read a change feed only once there is something new (a relation, or its name as text):
       {% if rowmerge_latest_version(ref('orders')) > var('last_read', -1) %} ... {% endif %} --#}
{% macro rowmerge_latest_version(relation) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {{ return(adapter.rowmerge_latest_version(relation.render() if relation.render is defined else relation | string)) }}
{% endmacro %}


{#-- The change table of a model relation: named by its model's change_data_feed config
     (rowmerge_changes_table), else the default `<model>__changes`. --#}
{% macro rowmerge_changes_relation(relation) %}
  {%- if execute -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'model' -%}
      {%- if (node.alias or node.name) == relation.identifier and node.schema == relation.schema -%}
        {%- set name = rowmerge_changes_table(node.config, relation) -%}
        {%- if name -%}{{ return(name) }}{%- endif -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return(rowmerge_changes_table({'change_data_feed': true}, relation)) }}
{% endmacro %}
