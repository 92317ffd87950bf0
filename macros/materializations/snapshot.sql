{#--
  The snapshot materialization for adapter `rowmerge`. dbt-spark refuses snapshots on
  anything but delta/iceberg/hudi because it needs SQL MERGE; on Parquet/ORC this adapter runs
  exactly the merge dbt's snapshot_merge_sql describes through the engine (journal, history,
  change feed and lock like any row_level_merge model). Delta/iceberg/hudi tables keep
  dbt-spark's SQL MERGE.

  The staging rows (dbt_change_type insert/update/delete, hard_deletes, dbt_valid_to_current,
  snapshot_meta_column_names) come from dbt's own helpers; only the merge is ours.
--#}
{% materialization snapshot, adapter='rowmerge' %}
  {%- set target_table = model.get('alias', model.get('name')) -%}
  {%- set strategy_name = config.get('strategy') -%}
  {%- set unique_key = config.get('unique_key') -%}
  {%- set file_format = config.get('file_format') or 'parquet' -%}
  {%- set grant_config = config.get('grants') -%}

  {% set target_relation_exists, target_relation = get_or_create_relation(
          database=none,
          schema=model.schema,
          identifier=target_table,
          type='table') -%}

  {#-- Which merge runs is decided by the table that exists, else by file_format. --#}
  {%- set sql_merge = target_relation.is_delta or target_relation.is_iceberg or target_relation.is_hudi
        if target_relation_exists else file_format in ['delta', 'iceberg', 'hudi'] -%}
  {%- if not sql_merge and file_format not in ['parquet', 'orc'] -%}
    {% do exceptions.raise_compiler_error(
        "Snapshot " ~ model.name ~ ": file_format '" ~ file_format ~ "' is not supported; use parquet or orc "
        ~ "(merged by dbt-rowmerge) or delta, iceberg or hudi (their own MERGE)") %}
  {%- endif -%}

  {#-- A dry run (`--vars '{rowmerge_dry_run: true}'`, or config `dry_run: true`) of a
       Parquet/ORC snapshot plans its merge and reports it, as a row_level_merge model's does:
       no schema, table or column is created, no row written, no grant, doc or post-hook run. --#}
  {%- set dry = not sql_merge and rowmerge_dry_run_requested(model.config) -%}
  {%- if not sql_merge -%}
    {%- do adapter.rowmerge_check_snapshot_config(model.config, target_relation) -%}
  {%- endif -%}

  {% if not dry and not adapter.check_schema_exists(model.database, model.schema) %}
    {% do create_schema(model.schema) %}
  {% endif %}

  {%- if not target_relation.is_table -%}
    {% do exceptions.relation_wrong_type(target_relation, 'table') %}
  {%- endif -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {% set strategy_macro = strategy_dispatch(strategy_name) %}
  {% set strategy = strategy_macro(model, "snapshotted_data", "source_data", model['config'], target_relation_exists) %}

  {% if not target_relation_exists %}

      {% set build_sql = build_snapshot_table(strategy, model['compiled_code']) %}
      {% set build_or_select_sql = build_sql %}
      {{ check_time_data_types(build_or_select_sql) }}
      {%- if dry -%}
        {%- set counted = run_query('select count(*) from (\n' ~ build_sql ~ '\n) as rowmerge_dry_run') -%}
        {%- do store_result('main', response=adapter.rowmerge_dry_run_created(target_relation, counted.columns[0].values()[0])) -%}
      {%- else -%}
      {% call statement('main') %}
          {{ create_table_as(False, target_relation, build_sql) }}
      {% endcall %}
      {%- if not sql_merge -%}
        {%- do rowmerge_start_history(target_relation, 'CREATE TABLE') -%}
      {%- endif -%}
      {%- endif -%}

  {% else %}

      {% set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() %}
      {{ adapter.assert_valid_snapshot_target_given_strategy(target_relation, columns, strategy) }}

      {% set build_or_select_sql = snapshot_staging_table(strategy, sql, target_relation) %}
      {{ check_time_data_types(build_or_select_sql) }}
      {% set staging_table = spark_build_snapshot_staging_table(strategy, sql, target_relation) %}

      {% set remove_columns = ['dbt_change_type', 'DBT_CHANGE_TYPE', 'dbt_unique_key', 'DBT_UNIQUE_KEY'] %}
      {% if unique_key | is_list %}
          {% for key in strategy.unique_key %}
              {% do remove_columns.append('dbt_unique_key_' + loop.index|string) %}
              {% do remove_columns.append('DBT_UNIQUE_KEY_' + loop.index|string) %}
          {% endfor %}
      {% endif %}

      {% set missing_columns = adapter.get_missing_columns(staging_table, target_relation)
                                   | rejectattr('name', 'in', remove_columns)
                                   | list %}
      {%- if dry -%}
        {#-- the columns are not added: the planned merge leaves them out --#}
        {%- for column in missing_columns -%}
          {%- do remove_columns.append(column.name) -%}
        {%- endfor -%}
        {%- if missing_columns -%}
          {{ log("rowmerge dry run: " ~ target_relation ~ " would gain column(s) " ~ (missing_columns | map(attribute='name') | join(', ')), info=True) }}
        {%- endif -%}
      {%- else -%}
        {% do create_columns(target_relation, missing_columns) %}
      {%- endif -%}

      {% set source_columns = adapter.get_columns_in_relation(staging_table)
                                   | rejectattr('name', 'in', remove_columns)
                                   | map(attribute='name') | list %}

      {% if sql_merge %}
        {% set quoted_source_columns = [] %}
        {% for column in source_columns %}
          {% do quoted_source_columns.append(adapter.quote(column)) %}
        {% endfor %}
        {% call statement('main') %}
          {{ snapshot_merge_sql(target=target_relation, source=staging_table, insert_cols=quoted_source_columns) }}
        {% endcall %}
      {% else %}
        {%- set cfg = rowmerge_snapshot_config(columns, source_columns) -%}
        {%- set spec = rowmerge_planned_spec(staging_table, target_relation, cfg) -%}
        {#-- `dbt snapshot --empty` selects no rows: every current row would look deleted. --#}
        {%- if flags.EMPTY -%}
          {%- do store_result('main', response=adapter.rowmerge_skip_merge(spec, '--empty')) -%}
        {%- elif dry -%}
          {%- do store_result('main', response=adapter.rowmerge_dry_run(spec)) -%}
        {%- else -%}
          {%- do store_result('main', response=adapter.rowmerge_run_merge(spec)) -%}
        {%- endif -%}
      {% endif %}

  {% endif %}

  {%- if dry -%}
    {%- if staging_table is defined -%}
      {%- do post_snapshot(staging_table) -%}
    {%- endif -%}
    {{ return({'relations': [target_relation] if target_relation_exists else []}) }}
  {%- endif -%}

  {% set should_revoke = should_revoke(target_relation_exists, full_refresh_mode=False) %}
  {% do apply_grants(target_relation, grant_config, should_revoke=should_revoke) %}

  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks, inside_transaction=True) }}

  {{ adapter.commit() }}

  {% if staging_table is defined %}
      {% do post_snapshot(staging_table) %}
  {% endif %}

  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}

{% endmaterialization %}


{#-- The row_level_merge config of dbt's snapshot merge (default__snapshot_merge_sql): match
     on dbt_scd_id; close the current version of an updated or deleted row; insert new
     versions. Of the snapshot's config only change_data_feed, lock_timeout_s and the
     table's upkeep (auto_compact, retain_versions, ...) are ours to take. --#}
{% macro rowmerge_snapshot_config(columns, insert_columns) %}
  {%- set dest, src = 'DBT_INTERNAL_DEST', 'DBT_INTERNAL_SOURCE' -%}
  {%- set valid_to = dest ~ '.`' ~ columns.dbt_valid_to ~ '`' -%}
  {%- if config.get('dbt_valid_to_current') -%}
    {%- set current = '(' ~ valid_to ~ ' = ' ~ config.get('dbt_valid_to_current') ~ ' OR ' ~ valid_to ~ ' IS NULL)' -%}
  {%- else -%}
    {%- set current = valid_to ~ ' IS NULL' -%}
  {%- endif -%}
  {%- set values = {} -%}
  {%- for name in insert_columns -%}
    {%- do values.update({name: src ~ '.`' ~ name ~ '`'}) -%}
  {%- endfor -%}
  {%- set cfg = {
    'unique_key': columns.dbt_scd_id,
    'target_alias': dest,
    'source_alias': src,
    'skip_unchanged_updates': false,
    'merge_clauses': [
      {'when': 'matched', 'action': 'update',
       'condition': current ~ " AND " ~ src ~ ".dbt_change_type IN ('update', 'delete')",
       'set': {columns.dbt_valid_to: src ~ '.`' ~ columns.dbt_valid_to ~ '`'}},
      {'when': 'not_matched', 'action': 'insert',
       'condition': src ~ ".dbt_change_type = 'insert'",
       'values': values},
    ],
  } -%}
  {%- for key in ['change_data_feed', 'lock_timeout_s'] + adapter.rowmerge_defaults().upkeep_keys -%}
    {%- if config.get(key) is not none -%}{%- do cfg.update({key: config.get(key)}) -%}{%- endif -%}
  {%- endfor -%}
  {{ return(cfg) }}
{% endmacro %}


{#-- dbt's snapshot helpers read a relation's column names with the global
     `get_columns_in_relation` macro; dbt-spark's version returns the raw `describe` rows, which
     have no `.name`, so `hard_deletes='new_record'` wrote its deletion records with every
     source column NULL. Return columns, as the adapter method does. --#}
{% macro rowmerge__get_columns_in_relation(relation) -%}
  {{ return(adapter.get_columns_in_relation(relation)) }}
{%- endmacro %}
