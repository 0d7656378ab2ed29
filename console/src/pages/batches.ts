import { call, get, newIdempotencyKey } from '../api';
import { age, errorBox, fmtTime, h, link, syncServerClock, table, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';

const STATUS_CLASS: Record<string, string> = { RUNNING: 'st-running', BLOCKED: 'st-blocked', FAILED: 'st-failed', SUCCEEDED: 'st-ok' };

let lastResult: { at: number; text: string; ok: boolean } | null = null;

async function act(ctx: PageContext, what: string, path: string, confirmText: string): Promise<void> {
  if (!confirm(confirmText)) return;
  const res = await call('POST', path, {}, { 'Idempotency-Key': newIdempotencyKey() });
  const d = res.body.data;
  let detail = '';
  if (what === 'reconcile' && res.status === 200 && d) {
    detail = ` — scanned ${d.scanned}, validated ${d.validated}, already validated ${d.alreadyValidated}, still waiting ${d.waiting}, failed ${d.failed}`;
  }
  lastResult = { at: Date.now(), ok: res.status < 300, text: `${what}: ${res.status} ${res.body.code} — ${res.body.message}${detail} (audited)` };
  await renderBatches(ctx);
}

/** Batches with their lineage (split depth, parent), failure reason and MR; the selected batch's
 *  members. One read per refresh (two while a batch is selected). */
export async function renderBatches(ctx: PageContext): Promise<PageResult> {
  const selected = ctx.query.get('batch');
  const r = await get('/api/v1/ops/batches?limit=100');
  if (!ctx.alive()) return { status: r.status };
  const outcome = lastResult ? h('div', { id: 'reconcile-outcome', class: lastResult.ok ? 'ok' : 'error', role: 'status' }, `${fmtTime(lastResult.at)}: ${lastResult.text}`) : h('div', { id: 'reconcile-outcome' });
  const controls = h('div', { class: 'actions' },
    h('button', { type: 'button', id: 'run-reconcile', onclick: () => void act(ctx, 'reconcile', '/api/v1/ops/reconcile',
      'Run one reconciliation pass now? It reads every merged change awaiting its deploy confirmation and validates those the deploy watermark proves deployed.') }, 'Run reconciliation'),
    h('button', { type: 'button', id: 'run-round', onclick: () => void act(ctx, 'batch round', '/api/v1/ops/batch/round',
      'Run one batch admission round now? Waiting changes are claimed into a new batch when no batch of their branch is active.') }, 'Run batch round'));
  if (r.status === 404 || r.status === 503) {
    ctx.show(h('h2', {}, 'Batches'), h('p', { class: 'muted' }, 'Batching is not available on this server.'), h('h3', {}, 'Reconciliation'), controls, outcome);
    return { status: 200 };
  }
  if (r.status !== 200) return failedRead(ctx, r, 'Batches', '#batches');
  const items = r.body.data.items as any[];
  const totals: Record<string, number> = {};
  for (const b of items) totals[b.status] = (totals[b.status] ?? 0) + 1;
  const rows = items.map((b) => [
    link(`/batches?batch=${b.id}`, String(b.id), { 'data-batch': b.id }),
    h('span', { class: 'status ' + (STATUS_CLASS[b.status] ?? '') }, b.status),
    `${b.repository} → ${b.targetBranch}`,
    b.mrIid ? '!' + b.mrIid : '—',
    b.parentBatchId ? h('span', {}, 'split of ', link(`/batches?batch=${b.parentBatchId}`, String(b.parentBatchId)), ` (depth ${b.splitDepth})`) : 'root',
    b.failureReason || '—',
    fmtTime(b.createdAtMs), age(b.updatedAtMs),
  ]);
  let detail: HTMLElement | null = null;
  if (selected) {
    const d = await get(`/api/v1/ops/batches/${encodeURIComponent(selected)}`);
    if (!ctx.alive()) return { status: d.status };
    if (d.status === 200) {
      const b = d.body.data;
      syncServerClock(d.body.data.nowMs);
      detail = h('section', { id: 'batch-detail' },
        h('h3', {}, `Batch ${b.id} — `, h('span', { class: 'status ' + (STATUS_CLASS[b.status] ?? '') }, b.status)),
        b.failureReason ? h('p', { class: 'err' }, 'Failure: ' + b.failureReason) : null,
        h('p', { id: 'batch-owner' }, b.ownerInstance ? `Driven by instance ${b.ownerInstance}` : 'No owner: the next coordinator round takes it'),
        table(['change', 'title', 'subject', 'step', 'phase'], (b.members as any[]).map((m) => [
          link(`/operations/${m.operationId}`, m.operationId, { class: 'mono' }), m.title, m.subject, m.step, m.phase]), { id: 'batch-members' }),
        b.status === 'RUNNING' || b.status === 'BLOCKED'
          ? h('div', { class: 'actions' },
            h('button', { type: 'button', class: 'destructive', onclick: () => void act(ctx, 'settle', `/api/v1/ops/batches/${b.id}/settle`,
              `Settle batch ${b.id}? Its MR is closed and re-read (merged wins); members go back to waiting or fail.`) }, 'Settle batch'),
            b.status === 'BLOCKED' ? h('button', { type: 'button', onclick: () => void act(ctx, 'unblock', `/api/v1/ops/batches/${b.id}/unblock`,
              `Release blocked batch ${b.id}'s slot so the next round can run?`) }, 'Unblock') : null)
          : null);
    } else {
      detail = errorBox(d.status, d.body.message);
    }
  }
  ctx.show(
    h('h2', {}, 'Batches'),
    h('p', { class: 'muted', id: 'batch-totals' }, `${items.length} batch(es): ` + (Object.entries(totals).map(([k, v]) => `${v} ${k}`).join(', ') || 'none')),
    items.length ? table(['batch', 'status', 'repository → branch', 'MR', 'lineage', 'failure reason', 'created (UTC)', 'updated'], rows, { id: 'batches' })
      : h('p', { id: 'batches', class: 'muted' }, 'No batches yet.'),
    detail,
    h('h3', {}, 'Reconciliation and rounds'), controls, outcome);
  return { status: 200 };
}
