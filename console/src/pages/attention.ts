import { get } from '../api';
import { age, errorLine, fmtTime, h, link, syncServerClock, table, when, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';
import { setPollInterval } from '../main';

/** The reasons in the order the server lists them, with what an operator reads for each. */
export const REASONS: Record<string, string> = {
  FAILED: 'Failed: waits for an operator',
  OUTCOME_UNKNOWN: 'Outcome unknown: a human confirms',
  OVERDUE_APPROVAL: 'Approval overdue',
  LATE_WAIT: 'Late: a wake passed, nothing ran',
  STUCK_ACTOR: 'Stuck actor',
  CALLBACK_UNAPPLIED: 'Callback not applied',
};

let reasonFilter = '';

/** Everything that needs a human or is late, in one ops read per refresh, oldest first. */
export async function renderAttention(ctx: PageContext): Promise<PageResult> {
  const r = await get('/api/v1/ops/attention');
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) return failedRead(ctx, r, 'Needs attention', '#attention-table, #attention-empty');
  const d = r.body.data;
  syncServerClock(d.nowMs);
  setPollInterval(d.pollMs);
  const counts = d.counts as Record<string, number>;
  const cards = h('div', { class: 'cards', id: 'attention-counts' },
    Object.keys(REASONS).map((k) => h('button', {
      type: 'button', class: `card reason-${k}` + (reasonFilter === k ? ' selected' : ''), 'data-reason': k,
      'aria-pressed': reasonFilter === k ? 'true' : 'false',
      onclick: () => { reasonFilter = reasonFilter === k ? '' : k; void renderAttention(ctx); },
    }, h('div', { class: 'n' }, counts[k] ?? 0), h('div', { class: 'muted' }, REASONS[k]))));
  const items = (d.items as any[]).filter((i) => !reasonFilter || i.reason === reasonFilter);
  const rows = items.map((i) => [
    h('span', { title: 'since ' + fmtTime(i.sinceMs) }, age(i.sinceMs)),
    h('span', { class: `reason reason-${i.reason}` }, REASONS[i.reason] ?? i.reason),
    i.operationId
      ? h('span', {}, link(`/operations/${i.operationId}`, i.operationId, { class: 'op-link mono', 'data-op': i.operationId }),
        i.title ? h('div', { class: 'muted' }, i.title) : null)
      : h('span', { class: 'muted' }, 'no change'),
    i.step ? h('span', {}, i.step.name, h('div', { class: 'muted' }, i.phase)) : i.callbackKind ? `${i.callbackKind} callback ${i.callbackOutcome}` : '—',
    h('span', { class: 'waits' }, i.waitsFor, i.deliveryId ? h('div', { class: 'muted mono' }, 'delivery ' + i.deliveryId) : null),
    fmtTime(i.sinceMs),
    i.dueMs ? h('span', {}, h('b', {}, i.dueLabel), ' ', when(i.dueMs)) : h('span', { class: 'muted' }, 'no deadline'),
    h('span', { class: 'err' }, errorLine(i.lastError, i.lastErrorStatus, i.lastErrorAtMs)),
  ]);
  ctx.show(
    h('h2', {}, 'Needs attention'),
    h('p', { class: 'muted' }, `${d.total} item(s), oldest first. Times are UTC; ages and "in …" are measured from the server's clock.` +
      (d.truncated ? ' Some kinds hit the read limit: not everything is listed.' : '')),
    cards,
    reasonFilter ? h('p', {}, 'Showing only: ', h('b', {}, REASONS[reasonFilter]), ' ',
      h('button', { type: 'button', class: 'linklike', onclick: () => { reasonFilter = ''; void renderAttention(ctx); } }, 'show all')) : null,
    items.length
      ? table(['age', 'reason', 'change', 'step', 'waits for', 'since (UTC)', 'deadline / next try', 'last error'], rows, { id: 'attention-table', class: 'attention' })
      : h('p', { id: 'attention-empty', class: 'muted' }, 'Nothing needs attention.'),
  );
  return { status: 200 };
}
