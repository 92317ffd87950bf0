{#--
  Version 0 of a row_level_merge table: called right after dbt created it (first run) or
  rebuilt it (--full-refresh, or replacing a view). Earlier versions are forgotten and the
  change table, with change_data_feed, starts empty; a full refresh says so in the log.
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
    {{ log("rowmerge: full refresh of " ~ relation.render() ~ ": history restarted at version 0 ("
           ~ earlier_versions ~ " earlier versions forgotten)" ~ feed, info=True) }}
  {%- endif -%}
  {{ return(started) }}
{% endmacro %}


{#--
  The change rows of a model with change_data_feed, from start_version on (and up to
  end_version), for use in downstream models:

    select * from {{ table_changes(ref('orders'), 5) }} as c

  Columns: the model's columns plus _change_type (insert, update_preimage,
  update_postimage, delete), _commit_version and _commit_timestamp.
--#}
{% macro table_changes(relation, start_version, end_version=none) %}
  {%- do adapter.rowmerge_check_versions(relation, start_version, end_version) -%}
  {#-- abs() (versions are never negative) keeps Spark from pushing the filter to a Hive
       metastore, whose filter grammar rejects names starting with `_`; Spark still prunes the
       _commit_version partitions itself. --#}
  (select * from {{ rowmerge_changes_relation(relation) }}
   where abs(_commit_version) >= {{ start_version }}
   {%- if end_version is not none %} and abs(_commit_version) <= {{ end_version }}{% endif %})
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
