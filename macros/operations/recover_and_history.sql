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
  {{- adapter.rowmerge_check_arguments('rowmerge_history', kwargs.keys(), ['relation', 'limit']) -}}
  {%- set rows = adapter.rowmerge_history(relation, limit) -%}
  {{ log("version | timestamp | operation | inserted | updated | deleted | files added | files removed", info=True) }}
  {%- for r in rows -%}
    {#-- a RESTORE says which version it brought back --#}
    {%- set restored = (r.metrics or {}).get('restoredVersion') if r.operation == 'RESTORE' else none -%}
    {%- set operation = r.operation ~ (" (to version " ~ restored ~ ")" if restored is not none else "") -%}
    {{ log(r.version ~ " | " ~ r.timestamp ~ " | " ~ operation ~ " | " ~ r.rows_inserted ~ " | " ~ r.rows_updated ~ " | " ~ r.rows_deleted ~ " | " ~ r.files_added ~ " | " ~ r.files_removed, info=True) }}
  {%- else -%}
    {{ log("(no versions: " ~ relation ~ " has no rowmerge journal; only tables row_level_merge writes have a history)", info=True) }}
  {%- endfor -%}
  {{ return(rows) }}
{% endmacro %}


{#-- Compact a table's small files as an OPTIMIZE version (no row changes, no change rows):
     dbt run-operation rowmerge_optimize --args '{relation: analytics.orders, cluster_by: [order_id]}'
     As a post-hook: post_hook="{{ rowmerge_optimize(this) }}". Without arguments it follows the
     model whose relation this is: cluster_by is the model's `cluster_by`, else the table's stored
     clustering, else the model's unique_key (less partition columns; not stored), and
     target_file_size_mb the model's. cluster_by: [] packs files without ordering rows and clears
     the stored clustering. --#}
{% macro rowmerge_optimize(relation, cluster_by=none, partition_filter=none, target_file_size_mb=none, dry_run=false, lock_timeout_s=none) %}
  {{- adapter.rowmerge_check_arguments('rowmerge_optimize', kwargs.keys(),
      ['relation', 'cluster_by', 'partition_filter', 'target_file_size_mb', 'dry_run', 'lock_timeout_s']) -}}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- set node = rowmerge_model_node(relation) -%}
  {%- set model = node.config if node else {} -%}
  {%- set keys = cluster_by if cluster_by is not none else model.get('cluster_by') -%}
  {%- if keys is string -%}
    {%- set keys = [keys] -%}
  {%- endif -%}
  {%- set size = target_file_size_mb if target_file_size_mb is not none else model.get('target_file_size_mb') -%}
  {%- set wait = rowmerge_lock_timeout(lock_timeout_s, node) -%}
  {%- set done = adapter.rowmerge_optimize(relation, keys, partition_filter, size, dry_run, rowmerge_node_key(node), wait) -%}
  {{ log("rowmerge_optimize " ~ relation ~ ": " ~ done.message, info=True) }}
  {#-- as a hook, renders to no SQL: the work is done --#}
  {{ return('') }}
{% endmacro %}


{#-- The project's model or snapshot whose relation is `relation` (none if none's is), however
     the relation is spelled (`ANALYTICS.ORDERS`, `spark_catalog.analytics.orders`). --#}
{% macro rowmerge_model_node(relation) %}
  {%- set wanted = relation.render() if relation.render is defined else relation | string -%}
  {%- for node in graph.nodes.values() if node.resource_type in ['model', 'snapshot'] -%}
    {%- set rel = api.Relation.create(schema=node.schema, identifier=node.alias) -%}
    {%- if adapter.rowmerge_same_table(wanted, rel.render())
           or (node.relation_name and adapter.rowmerge_same_table(wanted, node.relation_name)) -%}
      {{ return(node) }}
    {%- endif -%}
  {%- endfor -%}
  {{ return(none) }}
{% endmacro %}


{#-- The key of a row of a node's table (rowmerge_model_node): the model's unique_key (none
     if it has none, or there is no node); a snapshot's rows are versions, one per dbt_scd_id
     (its unique_key repeats). --#}
{% macro rowmerge_node_key(node) %}
  {%- if not node -%}{{ return(none) }}{%- endif -%}
  {%- if node.resource_type == 'snapshot' -%}
    {%- set names = node.config.get('snapshot_meta_column_names') or {} -%}
    {{ return([names.get('dbt_scd_id') or 'dbt_scd_id']) }}
  {%- endif -%}
  {%- set key = node.config.get('unique_key') -%}
  {{ return([key] if key is string else key) }}
{% endmacro %}


{#-- How long an operation waits for the table's lock: its own `lock_timeout_s`, else the
     node's (model or snapshot), else none (the engine's default). --#}
{% macro rowmerge_lock_timeout(given, node) %}
  {{ return(given if given is not none else (node.config.get('lock_timeout_s') if node else none)) }}
{% endmacro %}


{#-- Make a table's rows those of an earlier version again, as a RESTORE version (its change
     rows describe exactly the rows that differ):
     dbt run-operation rowmerge_restore --args '{relation: analytics.orders, version: 41}'
     or {relation: ..., timestamp: "2026-11-26 09:00:00"} (UTC unless it says otherwise);
     dry_run: true reports what it would change. unique_key defaults to the model's, so a
     changed row shows as an update. Needs the version's files retained (retain_versions /
     retain_hours). --#}
{% macro rowmerge_restore(relation, version=none, timestamp=none, unique_key=none, dry_run=false, lock_timeout_s=none) %}
  {{- adapter.rowmerge_check_arguments('rowmerge_restore', kwargs.keys(),
      ['relation', 'version', 'timestamp', 'unique_key', 'dry_run', 'lock_timeout_s']) -}}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- set node = rowmerge_model_node(relation) -%}
  {%- set keys = unique_key if unique_key is not none else rowmerge_node_key(node) -%}
  {%- set wait = rowmerge_lock_timeout(lock_timeout_s, node) -%}
  {%- set done = adapter.rowmerge_restore(relation, version, timestamp, keys, dry_run, wait) -%}
  {{ log("rowmerge_restore " ~ relation ~ ": " ~ done.message, info=True) }}
  {{ return(done) }}
{% endmacro %}


{#-- Delete the files a table keeps past its retention, as a VACUUM version:
     dbt run-operation rowmerge_vacuum --args '{relation: analytics.orders}'
     retain_versions / retain_hours: keep this much instead of the table's retention, this once
     (change_feed_retain_versions: the change feed's versions likewise);
     files of versions current less than an hour ago are refused unless force: true;
     dry_run: true lists what it would delete and the bytes. As a post-hook:
     post_hook="{{ rowmerge_vacuum(this) }}". --#}
{% macro rowmerge_vacuum(relation, retain_versions=none, retain_hours=none, dry_run=false, force=false, change_feed_retain_versions=none, lock_timeout_s=none) %}
  {{- adapter.rowmerge_check_arguments('rowmerge_vacuum', kwargs.keys(),
      ['relation', 'retain_versions', 'retain_hours', 'dry_run', 'force', 'change_feed_retain_versions', 'lock_timeout_s']) -}}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- set wait = rowmerge_lock_timeout(lock_timeout_s, rowmerge_model_node(relation)) -%}
  {%- set done = adapter.rowmerge_vacuum(relation, retain_versions, retain_hours, dry_run, force, change_feed_retain_versions, wait) -%}
  {{ log("rowmerge_vacuum " ~ relation ~ ": " ~ done.message, info=True) }}
  {%- if adapter.rowmerge_flag(dry_run, 'dry_run') -%}
    {%- for path in done.files -%}
      {{ log("  " ~ path, info=True) }}
    {%- endfor -%}
    {{ log("  bytes: " ~ done.bytes_deleted ~ " of retained files, " ~ done.journal_bytes ~ " of journal files, "
           ~ done.feed_bytes ~ " of change-feed files", info=True) }}
  {%- endif -%}
  {{ return('') }}
{% endmacro %}


{#-- A table as of an earlier version, to select from in a model or an analysis:
       select * from {{ rowmerge_as_of(ref('orders'), 41) }}
       select * from {{ rowmerge_as_of(ref('orders'), timestamp='2026-11-26 09:00:00') }}
     A temporary view of the session, created when the model runs (so a `view` model cannot
     select from it: Spark refuses a persistent view over a temporary one). --#}
{% macro rowmerge_as_of(relation, version=none, timestamp=none) %}
  {%- if not execute -%}{{ return(relation) }}{%- endif -%}
  {{ return(adapter.rowmerge_as_of_view(relation, version, timestamp)) }}
{% endmacro %}
