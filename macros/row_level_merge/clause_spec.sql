{#--
  Compile a model config into the clause spec the engine runs. These macros only translate:
  they never judge the config. `adapter.rowmerge_validate` judges the compiled spec and the
  config it came from, in Python (model_config.py), and raises one error naming the key.

  `cfg` is a mapping of config keys (the model's `model.config`, or a dict passed to the
  `rowmerge_compile` operation); `relation` is the model's relation; `columns` the target's
  column names, or none before the table exists (first run).
--#}

{#-- The validated spec of a model: compiled here, judged once in Python. --#}
{% macro rowmerge_spec(cfg, relation, source, columns=none) %}
  {%- set spec = rowmerge_compile_spec(cfg, relation, source, columns) -%}
  {{ return(adapter.rowmerge_validate(spec, cfg, relation.render(), columns)) }}
{% endmacro %}


{% macro rowmerge_compile_spec(cfg, relation, source, columns=none) %}
  {%- set defaults = adapter.rowmerge_defaults() -%}
  {%- set aliases = {
    'target': defaults.target_alias if cfg.get('target_alias') is none else cfg.get('target_alias'),
    'source': defaults.source_alias if cfg.get('source_alias') is none else cfg.get('source_alias')} -%}
  {%- set changes = rowmerge_changes_table(cfg, relation) -%}
  {%- set spec = {
    'version': defaults.spec_version,
    'target': relation.render(),
    'source': source,
    'target_alias': aliases.target,
    'source_alias': aliases.source,
    'on': rowmerge_on(cfg, aliases),
    'on_origin': rowmerge_on_origin(cfg),
    'clauses': rowmerge_clauses(cfg, aliases, columns),
    'skip_unchanged_updates': defaults.skip_unchanged_updates if cfg.get('skip_unchanged_updates') is none else cfg.get('skip_unchanged_updates'),
    'change_data_feed': {'table': changes} if changes else none,
    'schema_evolution': cfg.get('on_schema_change') == 'append_new_columns',
  } -%}
  {%- if cfg.get('lock_timeout_s') is not none -%}
    {%- do spec.update({'lock_timeout_s': cfg.get('lock_timeout_s')}) -%}
  {%- endif -%}
  {%- for key in adapter.rowmerge_defaults().spec_keys -%}
    {%- if cfg.get(key) is not none -%}
      {%- do spec.update({key: cfg.get(key)}) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set constraints = rowmerge_contract_constraints(cfg) -%}
  {%- if constraints -%}
    {%- do spec.update({'constraints': constraints}) -%}
  {%- endif -%}
  {{ return(spec) }}
{% endmacro %}


{#-- The model contract's not_null and check constraints (column- and model-level), which
     the engine enforces on every row a merge writes; none unless the contract is enforced.
     Other constraint types are not enforced by Spark on Parquet/ORC and are left out. --#}
{% macro rowmerge_contract_constraints(cfg) %}
  {%- set contract = cfg.get('contract') -%}
  {%- if not contract or not contract.enforced or model is not mapping or model.get('columns') is none -%}
    {{ return([]) }}
  {%- endif -%}
  {%- set out = [] -%}
  {%- for name, column in model.get('columns', {}).items() -%}
    {%- for c in column.get('constraints') or [] -%}
      {%- if c.type == 'not_null' -%}
        {%- do out.append({'type': 'not_null', 'column': name}) -%}
      {%- elif c.type == 'check' and c.expression -%}
        {%- do out.append({'type': 'check', 'expression': c.expression, 'name': c.name if c.name else none}) -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endfor -%}
  {%- for c in model.get('constraints') or [] -%}
    {%- if c.type == 'not_null' -%}
      {%- for name in c.columns or [] -%}{%- do out.append({'type': 'not_null', 'column': name}) -%}{%- endfor -%}
    {%- elif c.type == 'check' and c.expression -%}
      {%- do out.append({'type': 'check', 'expression': c.expression, 'name': c.name if c.name else none}) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(out) }}
{% endmacro %}


{#-- `on`: equality on every unique_key column, ANDed with each incremental predicate. No
     unique_key ('' and [] included): FALSE, so every source row is inserted, as in dbt's merge. --#}
{% macro rowmerge_on(cfg, aliases) %}
  {%- set parts = [] -%}
  {%- for key in rowmerge_as_list(cfg.get('unique_key')) if not (key is string and key | trim == '') -%}
    {%- do parts.append(aliases.target ~ ".`" ~ key ~ "` = " ~ aliases.source ~ ".`" ~ key ~ "`") -%}
  {%- endfor -%}
  {%- if not parts -%}
    {{ return('FALSE') }}
  {%- endif -%}
  {%- for p in rowmerge_as_list(rowmerge_incremental_predicates(cfg)) -%}
    {%- do parts.append(rowmerge_operand(p)) -%}
  {%- endfor -%}
  {{ return(parts | join(' AND ')) }}
{% endmacro %}


{#-- The config keys `on` was compiled from, for messages (`unique_key` ...). --#}
{% macro rowmerge_on_origin(cfg) %}
  {%- set keys = rowmerge_as_list(cfg.get('unique_key')) | reject('equalto', '') | list -%}
  {%- if not keys -%}{{ return(none) }}{%- endif -%}
  {%- set origin = "`unique_key` (" ~ (keys | join(', ')) ~ ")" -%}
  {%- if rowmerge_as_list(rowmerge_incremental_predicates(cfg)) -%}
    {%- set origin = origin ~ " with `incremental_predicates`" -%}
  {%- endif -%}
  {{ return(origin) }}
{% endmacro %}


{#-- A config value as a list: a single value becomes a list of one (none: empty). --#}
{% macro rowmerge_as_list(value) %}
  {%- if value is none -%}{{ return([]) }}{%- endif -%}
  {%- if value is sequence and value is not string and value is not mapping -%}{{ return(value | list) }}{%- endif -%}
  {{ return([value]) }}
{% endmacro %}


{#-- A user's SQL text as a part of a larger condition: parenthesized, and where it holds a `--`
     comment ended by two line breaks first (Spark's lexer goes on with a comment over a
     backslash followed by a line break), as the engine's sqltext.operand does. --#}
{% macro rowmerge_operand(text) %}
  {{ return("(" ~ text ~ ("\n\n)" if "--" in (text | string) else ")")) }}
{% endmacro %}


{#-- `predicates` is dbt's older name of `incremental_predicates`; dbt-core's precedence. --#}
{% macro rowmerge_incremental_predicates(cfg) %}
  {{ return(cfg.get('predicates') or cfg.get('incremental_predicates') or []) }}
{% endmacro %}


{#-- merge_clauses as written, or the shorthand keys in the order the clauses run. --#}
{% macro rowmerge_clauses(cfg, aliases, columns) %}
  {%- if cfg.get('merge_clauses') is not none -%}
    {{ return(rowmerge_merge_clauses(cfg.get('merge_clauses'))) }}
  {%- endif -%}
  {%- set clauses = [] -%}
  {%- for clause in [rowmerge_delete_clause(cfg), rowmerge_update_clause(cfg, aliases, columns),
                     rowmerge_insert_clause(cfg), rowmerge_not_matched_by_source_clause(cfg)] -%}
    {%- if clause is not none -%}{%- do clauses.append(clause) -%}{%- endif -%}
  {%- endfor -%}
  {{ return(clauses) }}
{% endmacro %}


{#-- Each clause carries its origin so messages name `merge_clauses[i]`; what is not a list
     of mappings is passed on as it is, for the validator to name. --#}
{% macro rowmerge_merge_clauses(merge_clauses) %}
  {%- if merge_clauses is string or merge_clauses is mapping or merge_clauses is not iterable -%}
    {{ return(merge_clauses) }}
  {%- endif -%}
  {%- set named = [] -%}
  {%- for c in merge_clauses -%}
    {%- if c is mapping -%}
      {%- set copy = {} -%}
      {%- do copy.update(c) -%}
      {%- do copy.update({'origin': 'merge_clauses[' ~ loop.index0 ~ ']'}) -%}
      {%- do named.append(copy) -%}
    {%- else -%}
      {%- do named.append(c) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(named) }}
{% endmacro %}


{#-- delete_condition: WHEN MATCHED AND <cond> THEN DELETE, ahead of the update. --#}
{% macro rowmerge_delete_clause(cfg) %}
  {%- if not cfg.get('delete_condition') -%}{{ return(none) }}{%- endif -%}
  {{ return({'when': 'matched', 'condition': cfg.get('delete_condition'), 'action': 'delete',
             'origin': 'delete_condition'}) }}
{% endmacro %}


{#-- WHEN MATCHED [AND matched_condition] THEN UPDATE: every column, merge_update_columns,
     or all but merge_exclude_columns (those need the target's columns; `*` before it exists). --#}
{% macro rowmerge_update_clause(cfg, aliases, columns) %}
  {%- if cfg.get('skip_matched_step') is sameas true -%}{{ return(none) }}{%- endif -%}
  {%- set update_columns = cfg.get('merge_update_columns') -%}
  {%- set exclude_columns = cfg.get('merge_exclude_columns') -%}
  {%- set set_ = '*' -%}
  {%- set origin = 'the default matched update' -%}
  {%- if update_columns -%}
    {%- set set_ = {} -%}
    {%- for c in rowmerge_as_list(update_columns) -%}{%- do set_.update({c: aliases.source ~ ".`" ~ c ~ "`"}) -%}{%- endfor -%}
    {%- set origin = 'merge_update_columns' -%}
  {%- elif exclude_columns -%}
    {%- set origin = 'merge_exclude_columns' -%}
    {%- if columns is not none -%}
      {%- set excluded = rowmerge_as_list(exclude_columns) | map('string') | map('lower') | list -%}
      {%- set set_ = {} -%}
      {%- for c in columns if c | lower not in excluded -%}
        {%- do set_.update({c: aliases.source ~ ".`" ~ c ~ "`"}) -%}
      {%- endfor -%}
    {%- endif -%}
  {%- endif -%}
  {%- set clause = {'when': 'matched', 'action': 'update', 'set': set_, 'origin': origin} -%}
  {%- if cfg.get('matched_condition') -%}
    {%- do clause.update({'condition': cfg.get('matched_condition'), 'origin': 'matched_condition'}) -%}
  {%- endif -%}
  {{ return(clause) }}
{% endmacro %}


{#-- WHEN NOT MATCHED [AND not_matched_condition] [AND NOT (delete_condition)] THEN INSERT *:
     a row the delete clause would have deleted is never inserted. --#}
{% macro rowmerge_insert_clause(cfg) %}
  {%- if cfg.get('skip_not_matched_step') is sameas true -%}{{ return(none) }}{%- endif -%}
  {%- set conds = [] -%}
  {%- if cfg.get('not_matched_condition') -%}{%- do conds.append(cfg.get('not_matched_condition')) -%}{%- endif -%}
  {%- if cfg.get('delete_condition') -%}{%- do conds.append('NOT ' ~ rowmerge_operand(cfg.get('delete_condition'))) -%}{%- endif -%}
  {#-- Parenthesized only when two conditions are combined. --#}
  {%- if conds | length > 1 -%}{%- set conds = [rowmerge_operand(conds[0]), conds[1]] -%}{%- endif -%}
  {%- set clause = {'when': 'not_matched', 'action': 'insert', 'values': '*',
                    'origin': 'not_matched_condition' if cfg.get('not_matched_condition') else 'the default not-matched insert'} -%}
  {%- if conds -%}{%- do clause.update({'condition': conds | join(' AND ')}) -%}{%- endif -%}
  {{ return(clause) }}
{% endmacro %}


{#-- WHEN NOT MATCHED BY SOURCE [AND not_matched_by_source_condition] THEN DELETE | UPDATE SET
     not_matched_by_source_set. --#}
{% macro rowmerge_not_matched_by_source_clause(cfg) %}
  {%- set action = cfg.get('not_matched_by_source_action') -%}
  {%- if action is none -%}{{ return(none) }}{%- endif -%}
  {%- set clause = {'when': 'not_matched_by_source', 'action': action, 'origin': 'not_matched_by_source_action'} -%}
  {%- if cfg.get('not_matched_by_source_condition') -%}
    {%- do clause.update({'condition': cfg.get('not_matched_by_source_condition'),
                          'origin': 'not_matched_by_source_condition'}) -%}
  {%- endif -%}
  {%- if action == 'update' -%}
    {%- do clause.update({'set': cfg.get('not_matched_by_source_set')}) -%}
  {%- endif -%}
  {{ return(clause) }}
{% endmacro %}


{#--
  The change table of a model: none without change_data_feed; `<model>__changes` in the
  model's schema for `true`; a name otherwise (in the model's schema unless qualified).
--#}
{% macro rowmerge_changes_table(cfg, relation) %}
  {%- set cdf = cfg.get('change_data_feed') -%}
  {%- if cdf is sameas true -%}
    {{ return(relation.incorporate(path={'identifier': relation.identifier ~ adapter.rowmerge_defaults().changes_suffix}).render()) }}
  {%- elif cdf is string and cdf | trim -%}
    {{ return(cdf | trim if '.' in cdf else relation.incorporate(path={'identifier': cdf | trim}).render()) }}
  {%- endif -%}
  {{ return(none) }}
{% endmacro %}


{#-- Whether a full refresh of the model writes its change rows (default true; validated with
     the rest of the config as `change_data_feed_on_replace`). --#}
{% macro rowmerge_feed_on_replace(cfg) %}
  {{ return(cfg.get('change_data_feed_on_replace', true) is not sameas false) }}
{% endmacro %}


{#--
  dbt run-operation rowmerge_compile --args '{config: {unique_key: id, delete_condition: "..."}}'
  prints the clause spec a model with that config would run (validated: an invalid config
  fails with the message a run would give). `relation` names the model (default
  analytics.model), `columns` the target's columns if it exists.
--#}
{% macro rowmerge_compile(config, relation='analytics.model', columns=none) %}
  {%- set parts = relation.split('.') -%}
  {%- set rel = api.Relation.create(schema=parts[-2] if parts | length > 1 else none, identifier=parts[-1]) -%}
  {%- set spec = rowmerge_spec(config, rel, rel.identifier ~ '__dbt_tmp', columns) -%}
  {{ log(tojson(spec.raw, sort_keys=true), info=True) }}
  {{ return(spec.raw) }}
{% endmacro %}


{#-- Is this run a dry run? The model's `dry_run` config, or `--vars '{rowmerge_dry_run: true}'`
     for every row_level_merge model of the run. --#}
{% macro rowmerge_dry_run_requested(cfg) %}
  {{ return(cfg.get('dry_run') is true or var('rowmerge_dry_run', false) is true) }}
{% endmacro %}
