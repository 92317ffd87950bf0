{#--
  The incremental materialization for adapter `rowmerge`: dbt-spark's, with one more
  strategy. `row_level_merge` builds the source as a temporary view, applies
  on_schema_change, compiles the clause spec and hands it to the Python engine; every other
  strategy takes exactly dbt-spark's path (same validation messages, same SQL).
--#}
{% materialization incremental, adapter='rowmerge', supported_languages=['sql', 'python'] -%}
  {%- set raw_file_format = config.get('file_format', default='parquet') -%}
  {%- set raw_strategy = config.get('incremental_strategy') or 'append' -%}
  {%- set grant_config = config.get('grants') -%}

  {#-- An unknown strategy fails listing every strategy of this adapter (dbt-spark's list
      lacks row_level_merge). row_level_merge's file format is checked with the rest of its
      config, in Python (adapter.rowmerge_validate), so its message names its own choices. --#}
  {%- do adapter.rowmerge_check_strategy(raw_strategy) -%}
  {%- if raw_strategy == 'row_level_merge' -%}
    {%- set file_format = raw_file_format -%}
    {%- set strategy = raw_strategy -%}
  {%- else -%}
    {%- set file_format = dbt_spark_validate_get_file_format(raw_file_format) -%}
    {%- set strategy = dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format) -%}
  {%- endif -%}

  {%- set unique_key = config.get('unique_key', none) -%}
  {%- set partition_by = config.get('partition_by', none) -%}
  {%- set language = model['language'] -%}
  {%- set on_schema_change = incremental_validate_on_schema_change(config.get('on_schema_change'), default='ignore') -%}
  {%- set incremental_predicates = rowmerge_incremental_predicates(model.config) or none -%}
  {%- set target_relation = this -%}
  {%- set existing_relation = load_relation(this) -%}
  {#-- A full refresh that registers the table again (its shape changed) and stopped between
       the drop and the create left the table missing and its journal beside the folder:
       finish it, so this run merges into the table with its history. --#}
  {%- if strategy == 'row_level_merge' and existing_relation is none and adapter.rowmerge_finish_refresh(this, config.get('location_root')) -%}
    {%- set existing_relation = load_relation(this) -%}
  {%- endif -%}
  {% set tmp_relation = this.incorporate(path = {"identifier": this.identifier ~ '__dbt_tmp'}) -%}

  {%- if language == 'sql'-%}
    {%- set tmp_relation = tmp_relation.include(database=false, schema=false) -%}
  {%- endif -%}

  {#-- Invalid merge config fails before anything runs, even on the first run (the
       target's columns are not known yet: they are checked again at the merge). --#}
  {%- if strategy == 'row_level_merge' -%}
    {%- do rowmerge_spec(model.config, target_relation, tmp_relation.render()) -%}
  {%- endif -%}

  {%- if strategy in ['insert_overwrite', 'microbatch'] and partition_by -%}
    {%- call statement() -%}
      set spark.sql.sources.partitionOverwriteMode = DYNAMIC
    {%- endcall -%}
  {%- endif -%}

  {{ run_hooks(pre_hooks) }}

  {#-- `dbt run --empty` reads no rows: a merge would see an empty source (and a NOT MATCHED
       BY SOURCE delete would empty the table), a rebuild would replace the table with an
       empty one. The source view is still built and the spec compiled and validated against
       the table's columns; nothing is written. --#}
  {%- set empty_run = strategy == 'row_level_merge' and flags.EMPTY and existing_relation is not none and not existing_relation.is_view -%}

  {#-- A dry run (config `dry_run: true`, or `--vars '{rowmerge_dry_run: true}'` for every
       row_level_merge model of the run) builds the source view, compiles and validates the
       spec, plans the merge and reports the files and bytes it would rewrite and the rows
       per clause; the first run's dry run counts the rows the table would be created with.
       Nothing is written and post-hooks do not run (pre-hooks do, before it). --#}
  {%- if strategy == 'row_level_merge' and not empty_run and rowmerge_dry_run_requested(model.config) -%}
    {%- call statement('create_tmp_relation', language=language) -%}
      {{ create_table_as(True, tmp_relation, compiled_code, language) }}
    {%- endcall -%}
    {%- set creates = existing_relation is none or existing_relation.is_view or should_full_refresh() -%}
    {#-- on_schema_change as the real run meets it: 'fail' fails; sync_all_columns fails where
         the real run's ALTER TABLE would (Spark drops no column of a Parquet/ORC table and
         changes no column's type); the columns append_new_columns / sync_all_columns would
         add are logged, not added, and the merge is planned with them, as it will run. --#}
    {%- set planned_cfg = none -%}
    {%- if not creates and on_schema_change == 'fail' -%}
      {%- do process_schema_changes(on_schema_change, tmp_relation, existing_relation) -%}
    {%- elif not creates and on_schema_change != 'ignore' -%}
      {%- set changes = check_for_schema_changes(tmp_relation, existing_relation) -%}
      {%- if on_schema_change == 'sync_all_columns' and changes['target_not_in_source'] -%}
        {%- do exceptions.raise_compiler_error("Apache Spark does not support dropping columns from tables: on_schema_change='sync_all_columns' would drop "
              ~ (changes['target_not_in_source'] | map(attribute='name') | join(', ')) ~ " from " ~ target_relation ~ ", and the real run fails the same way") -%}
      {%- endif -%}
      {%- if on_schema_change == 'sync_all_columns' and changes['new_target_types'] -%}
        {%- do exceptions.raise_compiler_error("on_schema_change='sync_all_columns' would change the type of "
              ~ (changes['new_target_types'] | map(attribute='column_name') | join(', ')) ~ " in " ~ target_relation
              ~ ", which Spark refuses for a Parquet/ORC table (ALTER TABLE ... ALTER COLUMN ... TYPE): the real run fails there") -%}
      {%- endif -%}
      {%- if changes['source_not_in_target'] -%}
        {{ log("rowmerge dry run: " ~ target_relation ~ " (on_schema_change=" ~ on_schema_change ~ ") would gain column(s) ["
               ~ (changes['source_not_in_target'] | map(attribute='name') | join(', ')) ~ "]", info=True) }}
        {%- set planned_cfg = {} -%}
        {%- do planned_cfg.update(model.config) -%}
        {%- do planned_cfg.update({'on_schema_change': 'append_new_columns'}) -%}
      {%- endif -%}
    {%- endif -%}
    {%- set spec = rowmerge_planned_spec(tmp_relation, tmp_relation if creates else target_relation, planned_cfg) -%}
    {%- if creates -%}
      {%- do store_result('main', response=adapter.rowmerge_dry_run_create(spec)) -%}
    {%- else -%}
      {%- do store_result('main', response=adapter.rowmerge_dry_run(spec)) -%}
    {%- endif -%}
    {%- if language == 'python' -%}
      {% call statement('drop_relation') -%}
        drop table if exists {{ tmp_relation }}
      {%- endcall %}
    {%- endif -%}
    {{ return({'relations': [] if existing_relation is none else [target_relation]}) }}
  {%- endif -%}

  {#-- The first run and a full refresh build the table from what a merge into an empty table
       with the model's columns inserts: only the rows a not_matched clause inserts, with its
       values. Resolving that merge checks `on`, every condition and the key columns against
       the model's columns before the table exists. --#}
  {%- set build_code, build_language = compiled_code, language -%}
  {%- if strategy == 'row_level_merge' and not empty_run and (existing_relation is none or existing_relation.is_view or should_full_refresh()) -%}
    {%- call statement('create_tmp_relation', language=language) -%}
      {{ create_table_as(True, tmp_relation, compiled_code, language) }}
    {%- endcall -%}
    {%- set spec = rowmerge_planned_spec(tmp_relation, tmp_relation) -%}
    {%- set initial_view = adapter.rowmerge_initial_rows(spec, this.identifier ~ '__dbt_initial') -%}
    {%- set build_code = 'select * from ' ~ initial_view -%}
    {%- set build_language = 'sql' -%}
  {%- endif -%}

  {#-- A full refresh of a table this adapter journals is its next version (REPLACE TABLE):
       same folder, history and change feed go on (a consumer reading table_changes from its
       last version misses nothing); a refresh that changes the table's shape (a dropped,
       retyped or reordered column, partition_by, file_format) registers it again over the
       same folder. Only a retyped column of a model with a change feed (whose files hold the
       old type) rebuilds the table as dbt does, starting a new history (warned). --#}
  {%- set replaced = none -%}
  {%- if strategy == 'row_level_merge' and not empty_run and existing_relation is not none and not existing_relation.is_view and should_full_refresh() -%}
    {%- set replaced = adapter.rowmerge_replace(
          target_relation.render(), initial_view, partition_by, file_format,
          rowmerge_changes_table(model.config, target_relation),
          rowmerge_feed_on_replace(model.config), config.get('tblproperties'), spec) -%}
  {%- endif -%}

  {%- if empty_run -%}
    {%- call statement('create_tmp_relation', language=language) -%}
      {{ create_table_as(True, tmp_relation, compiled_code, language) }}
    {%- endcall -%}
    {%- set spec = rowmerge_planned_spec(tmp_relation, target_relation) -%}
    {%- do store_result('main', response=adapter.rowmerge_skip_merge(spec, '--empty')) -%}
    {%- if language == 'python' -%}
      {% call statement('drop_relation') -%}
        drop table if exists {{ tmp_relation }}
      {%- endcall %}
    {%- endif -%}
  {%- elif replaced is not none -%}
    {%- do store_result('main', response=replaced) -%}
  {%- elif existing_relation is none -%}
    {%- call statement('main', language=build_language) -%}
      {{ create_table_as(False, target_relation, build_code, build_language) }}
    {%- endcall -%}
    {% do persist_constraints(target_relation, model) %}
    {%- if strategy == 'row_level_merge' -%}
      {%- do store_result('main', response=adapter.rowmerge_created(rowmerge_start_history(target_relation, 'CREATE TABLE'))) -%}
    {%- endif -%}
  {%- elif existing_relation.is_view or should_full_refresh() -%}
    {% set is_delta = (file_format == 'delta' and existing_relation.is_delta) %}
    {#-- Counted before the drop: dropping a managed table deletes its journal too. --#}
    {%- set earlier_versions = adapter.rowmerge_version_count(existing_relation.render()) if strategy == 'row_level_merge' and not existing_relation.is_view else 0 -%}
    {% if not is_delta %}
      {% do adapter.drop_relation(existing_relation) %}
    {% endif %}
    {%- call statement('main', language=build_language) -%}
      {{ create_table_as(False, target_relation, build_code, build_language) }}
    {%- endcall -%}
    {% do persist_constraints(target_relation, model) %}
    {%- if strategy == 'row_level_merge' -%}
      {%- set started = rowmerge_start_history(target_relation, 'CREATE TABLE' if existing_relation.is_view else 'REPLACE TABLE', earlier_versions) -%}
      {%- do store_result('main', response=adapter.rowmerge_created(started)) -%}
    {%- endif -%}
  {%- else -%}
    {%- call statement('create_tmp_relation', language=language) -%}
      {{ create_table_as(True, tmp_relation, compiled_code, language) }}
    {%- endcall -%}
    {%- do process_schema_changes(on_schema_change, tmp_relation, existing_relation) -%}
    {%- if strategy == 'row_level_merge' -%}
      {%- set spec = rowmerge_planned_spec(tmp_relation, target_relation) -%}
      {%- set response = adapter.rowmerge_run_merge(spec) -%}
      {%- do store_result('main', response=response) -%}
    {%- else -%}
      {%- call statement('main') -%}
        {{ dbt_spark_get_incremental_sql(strategy, tmp_relation, target_relation, existing_relation, unique_key, incremental_predicates) }}
      {%- endcall -%}
    {%- endif -%}
    {%- if language == 'python' -%}
      {% call statement('drop_relation') -%}
        drop table if exists {{ tmp_relation }}
      {%- endcall %}
    {%- endif -%}
  {%- endif -%}

  {%- if build_language != language -%}
    {#-- a Python model's source was written as a table to build from; drop it --#}
    {% call statement('drop_relation') -%}
      drop table if exists {{ tmp_relation }}
    {%- endcall %}
  {%- endif -%}

  {% set should_revoke = should_revoke(existing_relation, full_refresh_mode) %}
  {% do apply_grants(target_relation, grant_config, should_revoke) %}

  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}

{%- endmaterialization %}


{#-- The validated spec merging `source_relation` into this model's table, checked against the
     columns of `columns_relation` (the model's own before the table exists, else the table's);
     `cfg`: the model config (a snapshot passes the config of its merge). target/run/<model>.sql
     then shows this MERGE, not the temporary view it reads. --#}
{% macro rowmerge_planned_spec(source_relation, columns_relation, cfg=none) %}
  {%- set columns = adapter.get_columns_in_relation(columns_relation) | map(attribute='name') | list -%}
  {%- set spec = rowmerge_spec(model.config if cfg is none else cfg, this, source_relation.render(), columns) -%}
  {%- do write(adapter.rowmerge_merge_text(spec)) -%}
  {{ return(spec) }}
{% endmacro %}


{#-- A row_level_merge model's contract constraints (not_null, check) are enforced by the
     engine on every row a merge or first run writes (they are in the clause spec); dbt-spark
     would ALTER the table to add them, which a Parquet/ORC table refuses after it was
     created. Every other model keeps dbt-spark's behaviour. --#}
{% macro rowmerge__persist_constraints(relation, model) %}
  {%- if config.get('materialized') == 'incremental' and config.get('incremental_strategy') == 'row_level_merge' -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return(spark__persist_constraints(relation, model)) }}
{% endmacro %}
