{#--
  Compile model config into the clause spec (DESIGN §4) that the engine runs.
  Either `merge_clauses` (used as written) or the dbt-databricks style shorthand keys,
  compiled in this order: matched delete (delete_condition), matched update, not matched
  insert, not matched by source delete/update. `on` is equality on every unique_key column
  ANDed with each incremental_predicates entry.
--#}
{% macro rowmerge_aliases() %}
  {{ return({
    'target': config.get('target_alias', none) or 'DBT_INTERNAL_DEST',
    'source': config.get('source_alias', none) or 'DBT_INTERNAL_SOURCE'}) }}
{% endmacro %}


{% macro rowmerge_on_condition() %}
  {%- set aliases = rowmerge_aliases() -%}
  {%- set unique_key = config.get('unique_key', none) -%}
  {%- set keys = [unique_key] if unique_key is string else (unique_key or []) -%}
  {%- set parts = [] -%}
  {%- for key in keys -%}
    {%- do parts.append(aliases.target ~ ".`" ~ key ~ "` = " ~ aliases.source ~ ".`" ~ key ~ "`") -%}
  {%- endfor -%}
  {%- set predicates = config.get('incremental_predicates', none) or config.get('predicates', none) or [] -%}
  {%- for p in predicates -%}
    {%- do parts.append("(" ~ p ~ ")") -%}
  {%- endfor -%}
  {{ return(parts | join(' AND ')) }}
{% endmacro %}


{#-- dest_columns: the target's column names, or none when not known yet (first run). --#}
{% macro rowmerge_clauses(dest_columns) %}
  {%- set aliases = rowmerge_aliases() -%}
  {%- set merge_clauses = config.get('merge_clauses', none) -%}
  {%- if merge_clauses is not none -%}
    {%- if merge_clauses is string or merge_clauses is mapping or merge_clauses is not iterable -%}
      {{ return(merge_clauses) }}
    {%- endif -%}
    {#-- Each clause carries its origin so engine messages name `merge_clauses[i]`. --#}
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
  {%- endif -%}
  {%- set problems = [] -%}
  {%- set clauses = [] -%}
  {%- set delete_condition = config.get('delete_condition', none) -%}
  {%- if delete_condition -%}
    {%- do clauses.append({'when': 'matched', 'condition': delete_condition, 'action': 'delete', 'origin': 'delete_condition'}) -%}
  {%- endif -%}

  {%- if not config.get('skip_matched_step', false) -%}
    {%- set update_columns = config.get('merge_update_columns', none) -%}
    {%- set exclude_columns = config.get('merge_exclude_columns', none) -%}
    {%- set lowered = (dest_columns or []) | map('lower') | list -%}
    {%- for key, cols in [('merge_update_columns', update_columns), ('merge_exclude_columns', exclude_columns)] -%}
      {%- if cols and dest_columns is not none -%}
        {%- for c in cols if c | lower not in lowered -%}
          {%- do problems.append("`" ~ key ~ "` names column '" ~ c ~ "', which " ~ this ~ " does not have (columns: " ~ (dest_columns | join(', ')) ~ ")") -%}
        {%- endfor -%}
      {%- endif -%}
    {%- endfor -%}
    {%- set set_ = '*' -%}
    {%- if update_columns -%}
      {%- set set_ = {} -%}
      {%- for c in update_columns -%}{%- do set_.update({c: aliases.source ~ ".`" ~ c ~ "`"}) -%}{%- endfor -%}
    {%- elif exclude_columns and dest_columns is not none -%}
      {%- set excluded = exclude_columns | map('lower') | list -%}
      {%- set set_ = {} -%}
      {%- for c in dest_columns if c | lower not in excluded -%}
        {%- do set_.update({c: aliases.source ~ ".`" ~ c ~ "`"}) -%}
      {%- endfor -%}
      {%- if not set_ -%}
        {%- do problems.append("`merge_exclude_columns` excludes every column; use skip_matched_step instead") -%}
        {%- set set_ = '*' -%}
      {%- endif -%}
    {%- endif -%}
    {%- set origin = 'merge_update_columns' if update_columns else ('merge_exclude_columns' if exclude_columns else 'the default matched update') -%}
    {%- if config.get('matched_condition', none) -%}{%- set origin = 'matched_condition' -%}{%- endif -%}
    {%- set clause = {'when': 'matched', 'action': 'update', 'set': set_, 'origin': origin} -%}
    {%- if config.get('matched_condition', none) -%}
      {%- do clause.update({'condition': config.get('matched_condition')}) -%}
    {%- endif -%}
    {%- do clauses.append(clause) -%}
  {%- endif -%}

  {%- if not config.get('skip_not_matched_step', false) -%}
    {%- set conds = [] -%}
    {%- if config.get('not_matched_condition', none) -%}{%- do conds.append(config.get('not_matched_condition')) -%}{%- endif -%}
    {%- if delete_condition -%}{%- do conds.append('NOT (' ~ delete_condition ~ ')') -%}{%- endif -%}
    {#-- Parenthesize only when two conditions are combined. --#}
    {%- if conds | length > 1 -%}{%- set conds = ['(' ~ conds[0] ~ ')', conds[1]] -%}{%- endif -%}
    {%- set origin = 'not_matched_condition' if config.get('not_matched_condition', none) else 'the default not-matched insert' -%}
    {%- set clause = {'when': 'not_matched', 'action': 'insert', 'values': '*', 'origin': origin} -%}
    {%- if conds -%}{%- do clause.update({'condition': conds | join(' AND ')}) -%}{%- endif -%}
    {%- do clauses.append(clause) -%}
  {%- endif -%}

  {%- set nmbs_action = config.get('not_matched_by_source_action', none) -%}
  {%- if nmbs_action in ['delete', 'update'] -%}
    {%- set clause = {'when': 'not_matched_by_source', 'action': nmbs_action, 'origin': 'not_matched_by_source_action'} -%}
    {%- if config.get('not_matched_by_source_condition', none) -%}
      {%- do clause.update({'origin': 'not_matched_by_source_condition'}) -%}
    {%- endif -%}
    {%- if config.get('not_matched_by_source_condition', none) -%}
      {%- do clause.update({'condition': config.get('not_matched_by_source_condition')}) -%}
    {%- endif -%}
    {%- if nmbs_action == 'update' -%}
      {%- do clause.update({'set': config.get('not_matched_by_source_set', none)}) -%}
    {%- endif -%}
    {%- do clauses.append(clause) -%}
  {%- endif -%}
  {%- if problems -%}
    {%- do rowmerge_raise_config_problems(problems) -%}
  {%- endif -%}
  {{ return(clauses) }}
{% endmacro %}


{% macro rowmerge_build_spec(target_name, source_name, dest_columns, on_schema_change) %}
  {%- set aliases = rowmerge_aliases() -%}
  {%- set spec = {
    'version': 1,
    'target': target_name,
    'source': source_name,
    'target_alias': aliases.target,
    'source_alias': aliases.source,
    'on': rowmerge_on_condition(),
    'clauses': rowmerge_clauses(dest_columns),
    'skip_unchanged_updates': config.get('skip_unchanged_updates', true),
    'change_data_feed': rowmerge_change_feed_spec(),
    'schema_evolution': on_schema_change == 'append_new_columns',
  } -%}
  {%- if config.get('lock_timeout_s', none) is not none -%}
    {%- do spec.update({'lock_timeout_s': config.get('lock_timeout_s')}) -%}
  {%- endif -%}
  {%- set problems = adapter.rowmerge_spec_problems(spec) -%}
  {%- if problems -%}
    {%- do rowmerge_raise_config_problems(problems) -%}
  {%- endif -%}
  {{ return(spec) }}
{% endmacro %}


{#--
  The change table of this model: none without change_data_feed; `<model>__changes` in the
  model's schema for `true`; a name otherwise (in the model's schema unless qualified).
--#}
{% macro rowmerge_changes_table() %}
  {%- set cdf = config.get('change_data_feed', none) -%}
  {%- if cdf is sameas true -%}
    {{ return(this.incorporate(path={'identifier': this.identifier ~ '__changes'}).render()) }}
  {%- elif cdf is string and cdf | trim -%}
    {{ return(cdf | trim if '.' in cdf else this.incorporate(path={'identifier': cdf | trim}).render()) }}
  {%- endif -%}
  {{ return(none) }}
{% endmacro %}


{% macro rowmerge_change_feed_spec() %}
  {%- set name = rowmerge_changes_table() -%}
  {{ return({'table': name} if name else none) }}
{% endmacro %}


{#-- The spec for this model's merge of its temp view into the existing table. --#}
{% macro rowmerge_merge_spec(target_relation, source_relation, on_schema_change) %}
  {%- set dest_columns = adapter.get_columns_in_relation(target_relation) | map(attribute='name') | list -%}
  {{ return(rowmerge_build_spec(target_relation.render(), source_relation.render(), dest_columns, on_schema_change)) }}
{% endmacro %}
