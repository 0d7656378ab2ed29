import { get } from '../api';
import { age, h, link, patchChildren, table, failedRead } from '../dom';
import type { PageContext, PageResult } from '../main';

const FIELDS = ['q', 'phase', 'step', 'flow', 'owner', 'subject', 'target', 'older_than_s'];
const LABELS: Record<string, string> = { q: 'search: id, title or MR number' };

export async function renderOperations(ctx: PageContext): Promise<PageResult> {
  // The filter form is built once per visit; polls only refresh the result table.
  let results = ctx.root.querySelector('#op-results') as HTMLElement | null;
  if (!results) {
    const form = h('form', { class: 'filters', id: 'op-filters' },
      FIELDS.map((f) => h('label', {}, LABELS[f] ?? f, h('input', { name: f, id: 'filter-' + f, value: ctx.query.get(f) ?? '', size: f === 'q' ? 28 : 14 }))),
      h('button', { type: 'submit' }, 'Filter')) as HTMLFormElement;
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const f of FIELDS) {
        const v = (form.elements.namedItem(f) as HTMLInputElement).value.trim();
        if (v) q.set(f, v);
      }
      history.pushState(null, '', '/console/operations' + (q.toString() ? '?' + q : ''));
      window.dispatchEvent(new PopStateEvent('popstate'));
    });
    results = h('div', { id: 'op-results' });
    ctx.root.replaceChildren(h('h2', {}, 'Operations'), form, results);
  }
  const q = new URLSearchParams();
  for (const f of [...FIELDS, 'after', 'limit']) {
    const v = ctx.query.get(f);
    if (v) q.set(f, v);
  }
  const r = await get('/api/v1/ops/operations?' + q.toString());
  if (!ctx.alive()) return { status: r.status };
  if (r.status !== 200) return failedRead(ctx, r, 'Changes', '#op-table', results);
  const items = r.body.data.items as any[];
  const rows = items.map((o) => [
    link(`/operations/${o.operationId}`, o.operationId.slice(0, 8), { class: 'op-link', 'data-op': o.operationId }),
    o.title, o.subject, o.target, `${o.step.name} (${o.step.code})`, h('span', { class: 'phase phase-' + o.phase }, o.phase),
    o.mrUrl ? h('a', { href: o.mrUrl, target: '_blank', rel: 'noopener' }, '!' + o.mrIid) : '—', o.flow, o.ownerInstance ?? '—',
    age(o.updatedAtMs), o.attempts,
  ]);
  const next = r.body.data.nextAfter as string | null;
  const nextQ = new URLSearchParams(q);
  if (next) nextQ.set('after', next);
  patchChildren(results, [
    h('p', { id: 'op-total', class: 'muted' }, `${r.body.data.total} change(s) match; ${items.length} shown, oldest update first.`),
    table(['id', 'title', 'subject', 'target', 'step', 'phase', 'MR', 'flow', 'owner', 'unchanged for', 'failed attempts'], rows, { id: 'op-table' }),
    items.length === 0 ? h('p', { class: 'muted' }, 'No operations match.') : null,
    next ? link('/operations?' + nextQ.toString(), 'Next page →') : null,
  ].filter(Boolean) as Node[]);
  return { status: 200 };
}
