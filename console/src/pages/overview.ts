import { get } from '../api';
import { age, h, link, shortId, syncServerClock, table, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';

export async function renderOverview(ctx: PageContext): Promise<PageResult> {
  const ov = await get('/api/v1/ops/overview');
  if (!ctx.alive()) return { status: ov.status };
  if (ov.status !== 200) return failedRead(ctx, ov, 'Overview', '#phase-counts');
  const d = ov.body.data;
  syncServerClock(d.nowMs);
  const phases = Object.entries(d.byPhase as Record<string, number>);
  const cards = h('div', { class: 'cards', id: 'phase-counts' },
    phases.map(([p, n]) => h('a', { class: 'card phase-' + p, href: `/console/operations?phase=${p}`, 'data-nav': '1', 'data-phase': p },
      h('div', { class: 'n' }, n), h('div', { class: 'muted' }, p))));
  const stuck = (d.stuck as any[]).map((o) => [
    link(`/operations/${o.operationId}`, shortId(o.operationId), { class: 'op-link', 'data-op': o.operationId }),
    o.title, o.step.name, o.phase, age(o.updatedAtMs), h('span', { class: 'why' }, o.why), o.ownerInstance ?? '—',
  ]);
  const cb = Object.entries((d.callbacks || {}) as Record<string, number>);
  const instances = (d.instances ?? []) as any[];
  ctx.show(
    h('h2', {}, 'Overview'),
    h('p', { class: 'muted' }, `instance ${d.instance} · ${d.liveActors} live actors here`),
    h('h3', {}, 'Changes by phase'), cards,
    h('h3', {}, 'Stuck-looking changes (oldest first)'),
    stuck.length ? table(['id', 'title', 'step', 'phase', 'unchanged for', 'why', 'owner'], stuck, { class: 'stuck', id: 'stuck' })
      : h('p', { id: 'stuck', class: 'muted' }, 'Nothing looks stuck.'),
    h('h3', {}, 'Callback outcomes'),
    cb.length ? table(['outcome', 'count'], cb.map(([k, v]) => [k, v]), { id: 'callback-counts' }) : h('p', { class: 'muted' }, 'No callbacks yet.'),
    h('h3', {}, 'Instances and leases'),
    table(['instance', 'status', 'lease', 'epoch', 'active owned', 'heartbeat'],
      instances.map((i) => [i.instanceId + (i.self ? ' (this)' : ''), i.status, i.leaseLive ? 'live' : 'expired', i.epoch, i.ownedActive, age(i.heartbeatAtMs) + ' ago'])),
  );
  return { status: 200 };
}
