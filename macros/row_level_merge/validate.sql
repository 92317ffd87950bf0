{#-- Strategy / file-format check for row_level_merge (other strategies use dbt-spark's). --#}
{% macro rowmerge_validate_strategy(raw_strategy, file_format) %}
  {% if file_format in ['delta', 'iceberg', 'hudi'] %}
    {% do exceptions.raise_compiler_error(
      "Invalid incremental strategy for file_format '" ~ file_format ~ "': row_level_merge is for plain "
      ~ "Parquet/ORC tables. A " ~ file_format ~ " table has MERGE INTO built in: use "
      ~ "incremental_strategy='merge' (dbt-spark's own merge) for it.") %}
  {% endif %}
  {% if file_format not in ['parquet', 'orc'] %}
    {% do exceptions.raise_compiler_error(
      "Invalid file_format '" ~ file_format ~ "' for incremental_strategy='row_level_merge': "
      ~ "set file_format to 'parquet' (the default) or 'orc'.") %}
  {% endif %}
  {% do return(raw_strategy) %}
{% endmacro %}


{#--
  Config problems visible without the data: collected, then raised once with all of them.
  Clause-level problems come from the engine's own validator (adapter.rowmerge_spec_problems),
  so dbt and a direct Python caller see the same messages.
--#}
{% macro rowmerge_validate_merge_config(strategy) %}
  {%- set problems = [] -%}
  {%- set merge_clauses = config.get('merge_clauses', none) -%}
  {%- set unique_key = config.get('unique_key', none) -%}
  {%- set shorthand = ['matched_condition', 'not_matched_condition', 'not_matched_by_source_action',
                       'not_matched_by_source_condition', 'not_matched_by_source_set',
                       'merge_update_columns', 'merge_exclude_columns', 'skip_matched_step',
                       'skip_not_matched_step', 'delete_condition'] -%}
  {%- if merge_clauses is not none -%}
    {%- if merge_clauses is string or merge_clauses is mapping or merge_clauses is not iterable -%}
      {%- do problems.append("`merge_clauses` must be a list of clauses (each with when, action, and condition/set/values as needed)") -%}
    {%- endif -%}
    {%- set mixed = [] -%}
    {%- for key in shorthand -%}
      {%- if config.get(key, none) is not none -%}{%- do mixed.append(key) -%}{%- endif -%}
    {%- endfor -%}
    {%- if mixed -%}
      {%- do problems.append("`merge_clauses` cannot be combined with the shorthand key(s) " ~ (mixed | join(', ')) ~ "; write those clauses into merge_clauses instead") -%}
    {%- endif -%}
  {%- endif -%}
  {%- if not unique_key -%}
    {%- do problems.append("`unique_key` is required for incremental_strategy='row_level_merge' (it builds the merge `on` condition; with merge_clauses too)") -%}
  {%- endif -%}
  {%- if config.get('merge_update_columns', none) and config.get('merge_exclude_columns', none) -%}
    {%- do problems.append("`merge_update_columns` and `merge_exclude_columns` cannot both be set; use one") -%}
  {%- endif -%}
  {%- set nmbs_action = config.get('not_matched_by_source_action', none) -%}
  {%- if nmbs_action is not none and nmbs_action not in ['delete', 'update'] -%}
    {%- do problems.append("`not_matched_by_source_action` must be 'delete' or 'update', got '" ~ nmbs_action ~ "'") -%}
  {%- endif -%}
  {%- if nmbs_action == 'update' and not config.get('not_matched_by_source_set', none) -%}
    {%- do problems.append("`not_matched_by_source_action`='update' needs `not_matched_by_source_set` (a mapping of target column to SQL expression)") -%}
  {%- endif -%}
  {%- if nmbs_action is none -%}
    {%- for key in ['not_matched_by_source_condition', 'not_matched_by_source_set'] -%}
      {%- if config.get(key, none) is not none -%}
        {%- do problems.append("`" ~ key ~ "` has no effect without `not_matched_by_source_action` ('delete' or 'update')") -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- if config.get('skip_matched_step', false) and config.get('skip_not_matched_step', false) and nmbs_action is none and not config.get('delete_condition', none) -%}
    {%- do problems.append("`skip_matched_step` and `skip_not_matched_step` together leave no clause to run") -%}
  {%- endif -%}
  {%- for key in ['merge_update_columns', 'merge_exclude_columns', 'incremental_predicates'] -%}
    {%- set value = config.get(key, none) -%}
    {%- if value is not none and (value is string or value is mapping or value is not iterable) -%}
      {%- do problems.append("`" ~ key ~ "` must be a list") -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set cdf = config.get('change_data_feed', none) -%}
  {%- if cdf is not none and not (cdf is sameas true or cdf is sameas false or (cdf is string and cdf | trim)) -%}
    {%- do problems.append("`change_data_feed` must be true, false or the name of the change table, got " ~ cdf) -%}
  {%- endif -%}
  {%- if problems -%}
    {%- do rowmerge_raise_config_problems(problems) -%}
  {%- endif -%}
  {#-- Clause-level checks, without the target's columns (not known before the first run). --#}
  {%- do rowmerge_build_spec(this.render(), this.identifier ~ '__dbt_tmp', none, config.get('on_schema_change', 'ignore')) -%}
{% endmacro %}


{% macro rowmerge_raise_config_problems(problems) %}
  {%- do exceptions.raise_compiler_error(adapter.rowmerge_config_error(this.render(), problems)) -%}
{% endmacro %}
