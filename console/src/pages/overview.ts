import { get } from '../api';
import { age, errorBox, h, link, table } from '../dom';
import type { PageContext } from '../main';

export async function renderOverview(ctx: PageContext): Promise<void> {
  const [ov, inst, batches] = await Promise.all([
    get('/api/v1/ops/overview'),
    get('/api/v1/ops/instances'),
    get('/api/v1/ops/batches'),
  ]);
  if (!ctx.alive()) return;
  if (ov.status !== 200) {
    ctx.root.replaceChildren(h('h2', {}, 'Overview'), errorBox(ov.status, ov.body.message));
    return;
  }
  const d = ov.body.data;
  const phases = Object.entries(d.byPhase as Record<string, number>);
  const cards = h('div', { class: 'cards', id: 'phase-counts' },
    phases.map(([p, n]) => h('a', { class: 'card', href: `/console/operations?phase=${p}`, 'data-nav': '1', 'data-phase': p },
      h('div', { class: 'n' }, n), h('div', { class: 'muted' }, p))));
  const stuck = (d.stuck as any[]).map((o) => [
    link(`/operations/${o.operationId}`, o.operationId.slice(0, 8), { class: 'op-link', 'data-op': o.operationId }),
    o.title, o.step.name, o.phase, age(o.updatedAtMs), h('span', { class: 'why' }, o.why), o.ownerInstance ?? '—',
  ]);
  const cb = Object.entries((d.callbacks || {}) as Record<string, number>);
  const instances = inst.status === 200 ? (inst.body.data.items as any[]) : [];
  let batchView: HTMLElement;
  if (batches.status === 200) batchView = h('pre', { id: 'batch-status' }, JSON.stringify(batches.body.data, null, 2).slice(0, 2000));
  else if (batches.status === 404) batchView = h('p', { class: 'muted' }, 'Batch endpoints are not available on this server.');
  else batchView = errorBox(batches.status, batches.body.message);
  ctx.root.replaceChildren(
    h('h2', {}, 'Overview'),
    h('p', { class: 'muted' }, `instance ${d.instance} · ${d.liveActors} live actors here · refreshed ${new Date().toLocaleTimeString()}`),
    h('h3', {}, 'Operations by phase'), cards,
    h('h3', {}, 'Stuck-looking operations (oldest first)'),
    stuck.length ? table(['id', 'title', 'step', 'phase', 'unchanged for', 'why', 'owner'], stuck, { class: 'stuck', id: 'stuck' })
      : h('p', { id: 'stuck', class: 'muted' }, 'Nothing looks stuck.'),
    h('h3', {}, 'Callback outcomes'),
    cb.length ? table(['outcome', 'count'], cb.map(([k, v]) => [k, v]), { id: 'callback-counts' }) : h('p', { class: 'muted' }, 'No callbacks yet.'),
    h('h3', {}, 'Batch status'), batchView,
    h('h3', {}, 'Instances and leases'),
    table(['instance', 'status', 'lease', 'epoch', 'active owned', 'heartbeat'],
      instances.map((i) => [i.instanceId + (i.self ? ' (this)' : ''), i.status, i.leaseLive ? 'live' : 'expired', i.epoch, i.ownedActive, age(i.heartbeatAtMs) + ' ago'])),
  );
}
