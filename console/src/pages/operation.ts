import { call, get, newIdempotencyKey } from '../api';
import { age, errorBox, fmtTime, h, link, table } from '../dom';
import type { PageContext } from '../main';

const LABELS: Record<string, string> = {
  retrigger: 'Re-trigger step',
  'resend-approval': 'Resend approval',
  confirm: 'Confirm deploy (in effect)',
  fail: 'Force failure',
  close: 'Close (withdraws approval, closes MR)',
};

let lastOutcome: HTMLElement | null = null;
let lastOutcomeFor = '';

export async function renderOperation(ctx: PageContext): Promise<void> {
  // Never re-render under an open confirmation dialog: the operator is deciding on what they see.
  if (document.querySelector('dialog[open]')) return;
  const id = ctx.params.id;
  if (lastOutcomeFor !== id) lastOutcome = null;
  const r = await get(`/api/v1/ops/operations/${id}`);
  if (!ctx.alive() || document.querySelector('dialog[open]')) return;
  if (r.status !== 200) {
    ctx.root.replaceChildren(h('h2', {}, 'Operation ' + id), errorBox(r.status, r.body.message));
    return;
  }
  const o = r.body.data;
  const facts = table(['field', 'value'], [
    ['operation', o.operationId],
    ['title', o.title],
    ['subject / target', `${o.subject} / ${o.target}`],
    ['phase', h('span', { id: 'op-phase' }, o.phase)],
    ['step', h('span', { id: 'op-step' }, `${o.step.name} (${o.step.code})`)],
    ['flow', o.flow],
    ['merge request', o.mrUrl ? h('a', { href: o.mrUrl, target: '_blank', rel: 'noopener' }, `!${o.mrIid}`) : '—'],
    ['revert of', opLink(o.revertOf, 'op-revert-of')],
    ['reverted by', opLink(o.revertedBy, 'op-reverted-by')],
    ['owner instance', `${o.ownerInstance ?? '—'} (lease epoch ${o.leaseEpoch})`],
    ['next wake', o.nextWakeAtMs ? fmtTime(o.nextWakeAtMs) : '—'],
    ['attempts', o.attempts],
    ['last error', o.lastError ?? '—'],
    ['version', h('span', { id: 'op-version' }, o.version)],
    ['unchanged for', age(o.updatedAtMs)],
  ]);
  const timeline = table(['at (UTC)', 'from', 'to', 'phase', 'cause', 'by', 'instance'],
    (o.timeline as any[]).map((e) => [fmtTime(e.atMs), e.from ?? '(start)', h('b', {}, e.to), e.toPhase, e.cause, e.actor, e.instanceId ?? '—']),
    { id: 'timeline' });
  const callbacks = (o.callbacks as any[]).length
    ? table(['received', 'kind', 'delivery', 'outcome'], (o.callbacks as any[]).map((c) => [fmtTime(c.receivedAtMs), c.kind, c.deliveryId, c.outcome]))
    : h('p', { class: 'muted' }, 'No callbacks recorded for this operation.');
  const actions = h('div', { class: 'actions', id: 'actions' },
    (o.allowedActions as any[]).length
      ? (o.allowedActions as any[]).map((a) => h('button', {
          type: 'button', 'data-action': a.action,
          onclick: () => confirmAction(ctx, o, a.action, a.target),
        }, `${LABELS[a.action] ?? a.action} → ${a.target}`))
      : h('span', { class: 'muted' }, 'No operator action is allowed in this state.'));
  const live = o.live
    ? h('pre', { id: 'live' }, JSON.stringify(o.live.snapshot ?? o.live.summary, null, 2))
    : h('p', { class: 'muted', id: 'live' }, 'No live actor for this operation on this instance.');
  ctx.root.replaceChildren(
    h('h2', {}, 'Operation ', h('code', {}, o.operationId)),
    facts,
    h('h3', {}, 'Actions'), actions, lastOutcome ?? h('div', { id: 'action-outcome' }),
    h('h3', {}, 'Timeline'), timeline,
    h('h3', {}, 'Callbacks'), callbacks,
    h('h3', {}, 'Live actor'), live);
}

/** The console page of a linked change (a revert and the change it reverts name each other). */
function opLink(id: string | null | undefined, elementId: string): HTMLElement | string {
  return id ? link(`/operations/${id}`, id.slice(0, 8), { id: elementId, class: 'op-link', 'data-op': id }) : '—';
}

function confirmAction(ctx: PageContext, o: any, action: string, target: string): void {
  const needsReason = action === 'fail' || action === 'close';
  const reason = h('input', { id: 'action-reason', size: 40, placeholder: needsReason ? 'reason (required for fail)' : 'note (optional)' }) as HTMLInputElement;
  const dlg = h('dialog', { id: 'confirm-dialog' },
    h('p', {}, `${LABELS[action] ?? action} for ${o.operationId.slice(0, 8)}: ${o.step.name} → ${target}?`),
    h('p', { class: 'muted' }, `Acts only if the operation is still at version ${o.version}.`),
    reason,
    h('div', { style: 'margin-top: .8rem' },
      h('button', { type: 'button', id: 'confirm-yes', onclick: () => void run() }, 'Confirm'),
      ' ',
      h('button', { type: 'button', id: 'confirm-no', onclick: () => { dlg.close(); dlg.remove(); } }, 'Cancel'))) as HTMLDialogElement;
  // One key per confirmation: a double click or a retried request replays the first answer.
  const key = newIdempotencyKey();
  async function run(): Promise<void> {
    const body: any = { expectedVersion: o.version };
    if (reason.value.trim()) body.reason = reason.value.trim();
    const res = await call('POST', `/api/v1/ops/operations/${o.operationId}/${action}`, body, { 'Idempotency-Key': key });
    dlg.close();
    dlg.remove();
    lastOutcomeFor = o.operationId;
    lastOutcome = h('div', { id: 'action-outcome', class: res.status < 300 ? 'ok' : 'error', role: 'status' },
      `${action}: ${res.status} ${res.body.code} — ${res.body.message}` +
        (res.body.data?.withdrawn?.length ? ` (${res.body.data.withdrawn.join(', ')})` : '') +
        (res.body.data?.mergedWins ? ' — the MR had merged: merged wins' : ''));
    await renderOperation(ctx);
  }
  document.body.appendChild(dlg);
  dlg.showModal();
}
