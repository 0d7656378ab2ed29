import { call, get, newIdempotencyKey } from '../api';
import { errorBox, h } from '../dom';
import type { PageContext } from '../main';

// The batch endpoints belong to another part of the service; this page shows them when the server
// has them and says so when it does not.
export async function renderBatches(ctx: PageContext): Promise<void> {
  const r = await get('/api/v1/ops/batches');
  if (!ctx.alive()) return;
  const out = h('div', { id: 'reconcile-outcome' });
  const reconcile = h('button', {
    type: 'button', id: 'run-reconcile',
    onclick: async () => {
      if (!confirm('Run one reconciliation pass now?')) return;
      const res = await call('POST', '/api/v1/ops/reconcile', {}, { 'Idempotency-Key': newIdempotencyKey() });
      out.replaceChildren(h('div', { class: res.status < 300 ? 'ok' : 'error' }, `${res.status} ${res.body.code}: ${res.body.message}`));
    },
  }, 'Run reconciliation');
  let body: HTMLElement;
  if (r.status === 200) body = h('pre', { id: 'batches' }, JSON.stringify(r.body.data, null, 2));
  else if (r.status === 404) body = h('p', { class: 'muted' }, 'Batch endpoints are not available on this server.');
  else body = errorBox(r.status, r.body.message);
  ctx.root.replaceChildren(h('h2', {}, 'Batches'), body, h('h3', {}, 'Reconciliation'), reconcile, out);
}
