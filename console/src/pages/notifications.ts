import { get } from '../api';
import { errorLine, fmtTime, h, link, shortId, table, failedRead, when } from '../dom';
import type { PageContext, PageResult } from '../main';

const STATES = ['PENDING', 'DELIVERED', 'FAILED'];

/** The notification outbox: what each subscriber has been sent, is owed, or was given up on. */
export async function renderNotifications(ctx: PageContext): Promise<PageResult> {
  const q = new URLSearchParams();
  for (const k of ['state', 'operationId', 'subscriptionId']) {
    const v = ctx.query.get(k);
    if (v) q.set(k, v);
  }
  q.set('limit', '200');
  const r = await get('/api/v1/ops/notifications?' + q.toString());
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) return failedRead(ctx, r, 'Notifications', '#notify-table');
  const d = r.body.data;
  const counts = h('p', { id: 'notify-counts' },
    link('/notifications', 'all', { class: ctx.query.get('state') ? '' : 'active' }), ' · ',
    STATES.map((s, i) => [i ? ' · ' : '', link(`/notifications?state=${s}`, `${s} ${d.counts?.[s] ?? 0}`,
      { class: 'state state-' + s, 'data-state': s })]).flat());
  const rows = (d.items as any[]).map((n) => [
    h('span', { class: 'mono' }, n.deliveryId.slice(0, 8)),
    link(`/operations/${n.operationId}`, shortId(n.operationId), { class: 'op-link', 'data-op': n.operationId }),
    `#${n.sequence} ${n.kind}`,
    h('span', { class: 'state state-' + n.state }, n.state),
    n.url ?? '(subscription deleted)',
    String(n.attempts),
    n.lastStatus || n.lastError ? h('span', { class: 'err' }, errorLine(n.lastError, n.lastStatus, null)) : '—',
    n.state === 'PENDING' ? (n.nextAttemptAtMs ? when(n.nextAttemptAtMs) : 'due now') : n.deliveredAtMs ? fmtTime(n.deliveredAtMs) : '—',
    fmtTime(n.createdAtMs),
  ]);
  ctx.show(h('h2', {}, 'Notifications'),
    h('p', { class: 'muted' }, 'Every phase change is sent to its subscribers, signed, at least once and in order per change. ' +
      'A delivery that fails is retried with backoff until it is delivered or too old (then FAILED).'),
    counts,
    table(['delivery', 'change', 'event', 'state', 'subscriber URL', 'attempts', 'last answer', 'next try / delivered (UTC)', 'created (UTC)'],
      rows, { id: 'notify-table' }),
    d.items.length === 0 ? h('p', { class: 'muted' }, 'No notifications match.') : null);
  return { status: 200 };
}
