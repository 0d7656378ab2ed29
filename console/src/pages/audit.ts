import { get } from '../api';
import { errorBox, fmtTime, h, table } from '../dom';
import type { PageContext, PageResult } from '../main';

export async function renderAudit(ctx: PageContext): Promise<PageResult> {
  const r = await get('/api/v1/ops/audit?limit=200');
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) {
    if (!ctx.root.querySelector('#audit-table')) ctx.show(h('h2', {}, 'Audit log'), errorBox(r.status, r.body.message));
    return { status: r.status, message: r.body.message, retryAfterMs: r.retryAfterMs };
  }
  const rows = (r.body.data.items as any[]).map((a) => [
    fmtTime(a.atMs), a.operator, a.action, h('span', { class: 'mono' }, a.target),
    h('span', { class: a.outcome === 'OK' || String(a.outcome).startsWith('APPLIED') || String(a.outcome).startsWith('DRY_RUN') ? 'outcome-ok' : 'outcome-refused' }, a.outcome),
    h('code', {}, JSON.stringify(a.params)),
  ]);
  ctx.show(h('h2', {}, 'Audit log'),
    h('p', { class: 'muted' }, 'Every ops action, refusals included, with the operator as the server resolved it (params masked and truncated).'),
    table(['at (UTC)', 'operator', 'action', 'target', 'outcome', 'params'], rows, { id: 'audit-table' }));
  return { status: 200 };
}
