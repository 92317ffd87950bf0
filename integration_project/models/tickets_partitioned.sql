-- (e) Partitioned by status: an update that changes status moves the row to another
-- partition, and batch 2 creates a partition (on_hold) that did not exist before.
{{ config(
    unique_key='ticket_id',
    partition_by=['status'],
) }}

select
    cast(ticket_id as bigint) as ticket_id,
    priority,
    title,
    status
from {{ ref('raw_tickets') }}
where batch = {{ var('batch') }}
