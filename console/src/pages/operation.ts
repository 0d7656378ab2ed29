import { call, get, newIdempotencyKey } from '../api';
import { errorLine, fmtDuration, fmtTime, h, link, patch, shortId, syncServerClock, table, when, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';

const LABELS: Record<string, string> = {
  retrigger: 'Re-trigger step',
  'resend-approval': 'Resend approval',
  confirm: 'Confirm deploy (in effect)',
  fail: 'Force failure',
  close: 'Close change',
};

let lastOutcome: HTMLElement | null = null;
let lastOutcomeFor = '';

function dl(pairs: [string, any][], attrs: Record<string, any> = {}): HTMLElement {
  return h('dl', { class: 'fields', ...attrs }, pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', { 'data-field': k }, v ?? '—')]));
}

function liveActor(o: any): HTMLElement {
  if (!o.live) return h('p', { class: 'muted', id: 'live' }, 'No live actor for this change on the instance that answered (it waits in the database, or lives on another instance).');
  const s = o.live.snapshot ?? {};
  const sum = o.live.summary ?? {};
  return dl([
    ['instance', o.live.instance],
    ['step', s.step ?? sum.step?.name],
    ['step held, to be written with the next', s.heldStep || '—'],
    ['version', s.version ?? sum.version],
    ['busy (call or write in flight)', String(s.busy ?? sum.busy)],
    ['next wake (its own timer)', when(s.nextWakeMs || sum.nextWakeMs)],
    ['in this step since', fmtTime(s.stepEnteredMs ?? sum.stepEnteredMs)],
    ['polls in this step', s.polls ?? sum.polls],
    ['merge attempts', s.mergeAttempts ?? sum.mergeAttempts],
    ['mailbox', s.mailbox ?? '—'],
    ['spawned', fmtTime(s.spawnedMs ?? sum.spawnedMs)],
    ['last note', (s.lastNote ?? sum.lastNote) || '—'],
    ['last error', (s.lastError ?? sum.lastError) || '—'],
  ].concat(o.live.snapshotError ? [['snapshot', 'the actor did not answer in time: ' + o.live.snapshotError]] : []) as [string, any][], { id: 'live' });
}

export async function renderOperation(ctx: PageContext): Promise<PageResult> {
  const id = ctx.params.id;
  if (lastOutcomeFor !== id) lastOutcome = null;
  const r = await get(`/api/v1/ops/operations/${id}`);
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) return failedRead(ctx, r, 'Change ' + id, '#op-facts');
  const o = r.body.data;
  syncServerClock(o.nowMs);
  const attemptsByStep: Record<string, any> = {};
  for (const a of o.stepAttempts as any[]) attemptsByStep[a.step.name] = a;
  const pipelines = o.mrUrl ? h('a', { href: o.mrUrl + '/pipelines', target: '_blank', rel: 'noopener' }, 'MR pipelines') : '—';
  const facts = dl([
    ['title', o.title],
    ['subject / target', `${o.subject} / ${o.target}`],
    ['repository → branch', `${o.repository} → ${o.targetBranch}`],
    ['requester', o.requester ?? '—'],
    ['phase', h('span', { id: 'op-phase', class: 'phase phase-' + o.phase }, o.phase)],
    ['step', h('span', { id: 'op-step' }, `${o.step.name} (${o.step.code})`)],
    ['hint', h('span', { id: 'op-hint' }, h('b', {}, o.hint), ' — ', o.hintMessage)],
    ['waits for', h('span', { id: 'op-waits' }, o.waitsFor)],
    ['flow', o.flow],
    ['approval id', h('span', { class: 'mono', id: 'op-approval' }, o.approvalId ?? '—')],
    ['merge request', o.mrUrl ? h('a', { href: o.mrUrl, target: '_blank', rel: 'noopener', id: 'op-mr' }, `!${o.mrIid}`) : '—'],
    ['pipelines', pipelines],
    ['revert of', opLink(o.revertOf, 'op-revert-of')],
    ['reverted by', opLink(o.revertedBy, 'op-reverted-by')],
    ['batch', o.batchId ? link(`/batches?batch=${o.batchId}`, `batch ${o.batchId}`, { id: 'op-batch' }) : '—'],
    ['failed attempts in this step', h('span', { id: 'op-attempts' }, String(o.attempts))],
    ['last error', h('span', { id: 'op-last-error', class: 'err' }, errorLine(o.lastError, o.lastErrorStatus, o.lastErrorAtMs))],
    ['next wake', h('span', { id: 'op-next-wake' }, o.nextWake?.atMs ? `${when(o.nextWake.atMs)} — ${o.nextWake.source}` : o.nextWake ? `none — ${o.nextWake.source}` : 'none')],
    ['created', fmtTime(o.createdAtMs)],
    ['total time', h('span', { id: 'op-total' }, fmtDuration(o.totalMs) + (o.ended ? ' (ended)' : ' so far'))],
    ['owner instance', `${o.ownerInstance ?? '—'} (lease epoch ${o.leaseEpoch})`],
    ['version', h('span', { id: 'op-version' }, String(o.version))],
  ], { id: 'op-facts' });
  const stepAttempts = (o.stepAttempts as any[]).length
    ? table(['step', 'failed attempts', 'last error', 'first error'], (o.stepAttempts as any[]).map((a) => [
        a.step.name, h('b', {}, String(a.failedAttempts)), h('span', { class: 'err' }, errorLine(a.lastError, a.lastErrorStatus, a.lastErrorAtMs)), fmtTime(a.firstErrorAtMs),
      ]), { id: 'step-attempts' })
    : h('p', { class: 'muted', id: 'step-attempts' }, 'No step met an external error.');
  const timeline = table(['at (UTC)', 'from', 'to', 'time in step', 'failed attempts', 'phase', 'cause', 'by', 'instance'],
    (o.timeline as any[]).map((e) => [fmtTime(e.atMs), e.from ?? '(start)', h('b', {}, e.to),
      e.durationMs === null || e.durationMs === undefined ? '—' : fmtDuration(e.durationMs) + (e.running ? ' (running)' : ''),
      attemptsByStep[e.to] ? String(attemptsByStep[e.to].failedAttempts) : '', e.toPhase, e.cause, e.actor, e.instanceId ?? '—']),
    { id: 'timeline' });
  const callbacks = (o.callbacks as any[]).length
    ? table(['received (UTC)', 'kind', 'delivery', 'outcome', 'applied (UTC)'], (o.callbacks as any[]).map((c) => [
        fmtTime(c.receivedAtMs), c.kind, h('span', { class: 'mono' }, c.deliveryId), h('span', { class: 'cb-outcome cb-' + c.outcome }, c.outcome), fmtTime(c.appliedAtMs)]),
      { id: 'callbacks' })
    : h('p', { class: 'muted', id: 'callbacks' }, 'No callbacks recorded for this change.');
  const actions = h('div', { class: 'actions', id: 'actions' },
    (o.allowedActions as any[]).length
      ? (o.allowedActions as any[]).map((a) => h('button', {
          type: 'button', 'data-action': a.action, class: a.destructive ? 'destructive' : '',
          onclick: () => confirmAction(ctx, o, a),
        }, `${LABELS[a.action] ?? a.action} → ${a.target}`))
      : h('span', { class: 'muted' }, 'No operator action is allowed in this state.'));
  ctx.show(
    h('h2', {}, 'Change ', h('code', { id: 'op-id' }, o.operationId)),
    facts,
    h('h3', {}, 'Actions'), actions, lastOutcome ? (lastOutcome.cloneNode(true) as HTMLElement) : h('div', { id: 'action-outcome' }),
    h('h3', {}, 'Failed attempts per step'), stepAttempts,
    h('h3', {}, 'Timeline'), timeline,
    h('h3', {}, 'Callbacks (approval, deploy and GitLab webhooks)'), callbacks,
    h('h3', {}, 'Live actor'), liveActor(o));
  return { status: 200 };
}

/** The console page of a linked change (a revert and the change it reverts name each other). */
function opLink(id: string | null | undefined, elementId: string): HTMLElement | string {
  return id ? link(`/operations/${id}`, shortId(id), { id: elementId, class: 'op-link', 'data-op': id }) : '—';
}

function confirmAction(ctx: PageContext, o: any, a: any): void {
  const action = a.action as string;
  const reason = h('input', { id: 'action-reason', size: 48, placeholder: a.requiresReason ? 'reason (required)' : 'reason (optional, audited)' }) as HTMLInputElement;
  const invalid = h('div', { id: 'reason-invalid', class: 'error', hidden: true }, 'A reason is required for this action.');
  const yes = h('button', { type: 'button', id: 'confirm-yes', class: a.destructive ? 'destructive' : '', onclick: () => void run() },
    a.destructive ? `${LABELS[action] ?? action} (cannot be undone)` : 'Confirm') as HTMLButtonElement;
  const dlg = h('dialog', { id: 'confirm-dialog', class: a.destructive ? 'destructive' : '' },
    h('h3', {}, `${LABELS[action] ?? action}: ${o.step.name} → ${a.target}`),
    h('p', { id: 'action-effect' }, a.effect),
    a.warning ? h('p', { id: 'action-warning', class: 'warning', role: 'alert' }, '⚠ ', a.warning) : null,
    h('p', { class: 'muted' }, `Change ${o.operationId}. Acts only if it is still at version ${o.version}; otherwise the server refuses (and audits the refusal).`),
    h('label', {}, a.requiresReason ? 'Reason (required) ' : 'Reason ', reason), invalid,
    h('div', { style: 'margin-top: .8rem' }, yes, ' ',
      h('button', { type: 'button', id: 'confirm-no', onclick: () => { dlg.close(); dlg.remove(); } }, 'Cancel'))) as HTMLDialogElement;
  // One key per confirmation: a double click or a retried request replays the first answer.
  const key = newIdempotencyKey();
  async function run(): Promise<void> {
    if (a.requiresReason && !reason.value.trim()) {
      invalid.hidden = false;
      reason.focus();
      return;
    }
    yes.disabled = true;
    const body: any = { expectedVersion: o.version };
    if (reason.value.trim()) body.reason = reason.value.trim();
    const res = await call('POST', `/api/v1/ops/operations/${o.operationId}/${action}`, body, { 'Idempotency-Key': key });
    dlg.close();
    dlg.remove();
    lastOutcomeFor = o.operationId;
    const refused = res.status >= 300;
    lastOutcome = h('div', { id: 'action-outcome', class: refused ? 'error' : 'ok', role: 'status' },
      `${action}: ${res.status} ${res.body.code} — ${res.body.message}` +
        (res.body.data?.withdrawn?.length ? ` (${res.body.data.withdrawn.join(', ')})` : '') +
        (res.body.data?.mergedWins ? ' — the MR had merged: merged wins' : '') +
        (refused ? ' — nothing was changed; the refusal is in the audit log.' : ''));
    const live = ctx.root.querySelector('#action-outcome');
    if (live) patch(live, lastOutcome.cloneNode(true));
    await renderOperation(ctx);
  }
  document.body.appendChild(dlg);
  dlg.showModal();
}
