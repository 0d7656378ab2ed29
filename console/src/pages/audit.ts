import { get } from '../api';
import { errorBox, fmtTime, h, table } from '../dom';
import type { PageContext } from '../main';

export async function renderAudit(ctx: PageContext): Promise<void> {
  const r = await get('/api/v1/ops/audit?limit=200');
  if (!ctx.alive()) return;
  if (r.status !== 200) {
    ctx.root.replaceChildren(h('h2', {}, 'Audit log'), errorBox(r.status, r.body.message));
    return;
  }
  const rows = (r.body.data.items as any[]).map((a) => [
    fmtTime(a.atMs), a.operator, a.action, a.target, a.outcome, h('code', {}, JSON.stringify(a.params)),
  ]);
  ctx.root.replaceChildren(h('h2', {}, 'Audit log'),
    h('p', { class: 'muted' }, 'Every ops action, with the operator as the server resolved it (params masked and truncated).'),
    table(['at (UTC)', 'operator', 'action', 'target', 'outcome', 'params'], rows, { id: 'audit-table' }));
}
