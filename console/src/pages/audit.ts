import { get } from '../api';
import { fmtTime, h, table, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';

export async function renderAudit(ctx: PageContext): Promise<PageResult> {
  const r = await get('/api/v1/ops/audit?limit=200');
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) return failedRead(ctx, r, 'Audit log', '#audit-table');
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
