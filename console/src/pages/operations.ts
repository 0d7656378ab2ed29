import { call, get, newIdempotencyKey } from '../api';
import { age, errorLine, h, link, patchChildren, shortId, table, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';

// The filters as the URL carries them (so a filtered list can be shared and reloaded).
const TEXT_FIELDS = ['q', 'step', 'owner', 'subject', 'target', 'older_than_s'];
const LABELS: Record<string, string> = { q: 'search: id, title or MR number', older_than_s: 'unchanged for ≥ s' };
const PHASES = ['APPROVAL_SENDING', 'APPROVAL_SENT', 'MR_CREATING', 'MR_CREATED', 'MERGING', 'MERGED', 'VALIDATED',
  'CREATE_FAILED', 'HANDLE_FAILED', 'REJECTED', 'CLOSED', 'CANCELLED'];
const FLOWS = ['approve_then_create', 'create_then_approve'];
const BULK: Record<string, string> = { retrigger: 'Re-trigger the current step', fail: 'Force-fail' };

/** `active` defaults to on: a triage list starts with the changes that have not ended. */
function activeOnly(query: URLSearchParams): boolean {
  return query.get('active') !== '0';
}

/** The API filter of the page's query (what the list, its total and a bulk action all use). */
function apiFilter(query: URLSearchParams): Record<string, string> {
  const f: Record<string, string> = {};
  for (const k of [...TEXT_FIELDS, 'phase', 'flow']) {
    const v = query.get(k);
    if (v) f[k] = v;
  }
  if (activeOnly(query)) f.active = 'true';
  return f;
}

function select(name: string, options: string[], value: string, blank: string): HTMLSelectElement {
  return h('select', { name, id: 'filter-' + name },
    [h('option', { value: '' }, blank), ...options.map((o) => h('option', { value: o, selected: o === value }, o))]) as HTMLSelectElement;
}

function filterForm(query: URLSearchParams): HTMLFormElement {
  const form = h('form', { class: 'filters', id: 'op-filters' },
    TEXT_FIELDS.map((f) => h('label', {}, LABELS[f] ?? f, h('input', { name: f, id: 'filter-' + f, value: query.get(f) ?? '', size: f === 'q' ? 28 : 14 }))),
    h('label', {}, 'phase', select('phase', PHASES, query.get('phase') ?? '', 'any')),
    h('label', {}, 'flow', select('flow', FLOWS, query.get('flow') ?? '', 'any')),
    h('label', {}, h('input', { type: 'checkbox', name: 'active', id: 'filter-active', checked: activeOnly(query) }), ' not ended only'),
    h('label', {}, 'order', select('order', ['newest'], query.get('order') ?? '', 'oldest update first')),
    h('button', { type: 'submit' }, 'Filter')) as HTMLFormElement;
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const f of [...TEXT_FIELDS, 'phase', 'flow', 'order']) {
      const v = (form.elements.namedItem(f) as HTMLInputElement).value.trim();
      if (v) q.set(f, v);
    }
    if (!(form.elements.namedItem('active') as HTMLInputElement).checked) q.set('active', '0');
    history.pushState(null, '', '/console/operations' + (q.toString() ? '?' + q : ''));
    window.dispatchEvent(new PopStateEvent('popstate'));
  });
  return form;
}

/**
 * Bulk actions over the current filter: the API's dry run comes first and says how many changes match
 * and how many the action can move; only then is the action offered, for exactly that filter.
 */
function bulkPanel(): HTMLElement {
  // The filter of the list on screen when the button is pressed (the panel outlives filter changes).
  const current = () => apiFilter(new URLSearchParams(location.search));
  let filter = current();
  const action = h('select', { id: 'bulk-action' }, Object.entries(BULK).map(([v, t]) => h('option', { value: v }, t))) as HTMLSelectElement;
  const reason = h('input', { id: 'bulk-reason', size: 36, placeholder: 'reason (required to force-fail)' }) as HTMLInputElement;
  const result = h('div', { id: 'bulk-result', role: 'status' });
  let key = newIdempotencyKey();
  const apply = h('button', { type: 'button', id: 'bulk-apply', class: 'destructive', hidden: true }) as HTMLButtonElement;
  const count = h('button', { type: 'button', id: 'bulk-count' }, 'Count (dry run)') as HTMLButtonElement;
  const say = (cls: string, text: string) => result.replaceChildren(h('p', { class: cls }, text));
  action.addEventListener('change', () => { apply.hidden = true; result.replaceChildren(); });
  count.addEventListener('click', async () => {
    apply.hidden = true;
    filter = current();
    const r = await call('POST', `/api/v1/ops/bulk/${action.value}`, { filter, dryRun: true });
    if (r.status !== 200) return say('error', `${r.status} ${r.body.code}: ${r.body.message}`);
    const d = r.body.data;
    say('', `${d.matched} change(s) match this filter; ${d.eligible} can be moved by "${BULK[action.value]}"` +
      (d.capped ? ' (capped: only the first ones would be acted on)' : '') + '. Nothing has been done yet.');
    if (d.eligible > 0) {
      apply.textContent = `${BULK[action.value]}: ${d.eligible} change(s)`;
      apply.hidden = false;
      key = newIdempotencyKey();
    }
  });
  apply.addEventListener('click', async () => {
    if (action.value === 'fail' && !reason.value.trim()) return say('error', 'A reason is required to force-fail.');
    apply.hidden = true;
    const r = await call('POST', `/api/v1/ops/bulk/${action.value}`, { filter, dryRun: false, reason: reason.value.trim() },
      { 'Idempotency-Key': key });
    if (r.status !== 200) return say('error', `${r.status} ${r.body.code}: ${r.body.message}`);
    const outcomes = Object.entries((r.body.data.outcomes ?? {}) as Record<string, number>).map(([k, n]) => `${k} ${n}`).join(', ');
    say('ok', `Done over ${r.body.data.matched} matching change(s): ${outcomes || 'nothing moved'}. Audited.`);
  });
  return h('details', { id: 'bulk' }, h('summary', {}, 'Bulk action on this filter'),
    h('div', { class: 'filters' }, action, reason, count, apply), result);
}

export async function renderOperations(ctx: PageContext): Promise<PageResult> {
  // The form and the bulk panel are built once per visit; polls only refresh the result table.
  let results = ctx.root.querySelector('#op-results') as HTMLElement | null;
  if (!results) {
    results = h('div', { id: 'op-results' });
    ctx.root.replaceChildren(h('h2', {}, 'Changes'), filterForm(ctx.query), bulkPanel(), results);
  }
  const q = new URLSearchParams(apiFilter(ctx.query));
  for (const f of ['order', 'after', 'limit']) {
    const v = ctx.query.get(f);
    if (v) q.set(f, v);
  }
  const r = await get('/api/v1/ops/operations?' + q.toString());
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) return failedRead(ctx, r, 'Changes', '#op-table', results);
  const items = r.body.data.items as any[];
  const rows = items.map((o) => [
    link(`/operations/${o.operationId}`, shortId(o.operationId), { class: 'op-link', 'data-op': o.operationId }),
    o.title, `${o.subject} / ${o.target}`, `${o.repository} → ${o.targetBranch}`, `${o.step.name} (${o.step.code})`, h('span', { class: 'phase phase-' + o.phase }, o.phase),
    h('span', { class: 'reason' }, o.terminal ? 'ended' : o.waitsFor,
      o.lastError ? h('div', { class: 'err' }, errorLine(o.lastError, o.lastErrorStatus, o.lastErrorAtMs)) : null),
    o.mrUrl ? h('a', { href: o.mrUrl, target: '_blank', rel: 'noopener' }, '!' + o.mrIid) : '—', o.flow, o.ownerInstance ?? '—',
    age(o.updatedAtMs), o.attempts,
  ]);
  const next = r.body.data.nextAfter as string | null;
  const nextQ = new URLSearchParams(ctx.query);
  if (next) nextQ.set('after', next);
  const order = ctx.query.get('order') === 'newest' ? 'newest update first' : 'oldest update first';
  patchChildren(results, [
    h('p', { id: 'op-total', class: 'muted' },
      `${r.body.data.total} change(s) match${activeOnly(ctx.query) ? ' (not ended only)' : ''}; ${items.length} shown, ${order}.`),
    table(['id', 'title', 'subject / target', 'repository → branch', 'step', 'phase', 'waits for / last error', 'MR', 'flow', 'owner', 'unchanged for', 'failed attempts'],
      rows, { id: 'op-table' }),
    items.length === 0 ? h('p', { class: 'muted' }, 'No changes match.') : null,
    next ? link('/operations?' + nextQ.toString(), 'Next page →') : null,
  ].filter(Boolean) as Node[]);
  return { status: 200 };
}
