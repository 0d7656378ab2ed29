import { get } from '../api';
import { errorBox, h, table } from '../dom';
import type { PageContext } from '../main';

export async function renderConfig(ctx: PageContext): Promise<void> {
  const r = await get('/api/v1/ops/config');
  if (!ctx.alive()) return;
  if (r.status !== 200) {
    ctx.root.replaceChildren(h('h2', {}, 'Configuration'), errorBox(r.status, r.body.message));
    return;
  }
  const d = r.body.data;
  // describe() returns either {key: {value, source}} or a list; show both shapes readably.
  const entries: [string, any][] = Array.isArray(d) ? d.map((x: any) => [x.key ?? x.name, x]) : Object.entries(d);
  const rows = entries.map(([k, v]) => [h('code', {}, k),
    h('code', {}, JSON.stringify(v && typeof v === 'object' && 'value' in v ? v.value : v)),
    v && typeof v === 'object' && 'source' in v ? String(v.source) : '']);
  ctx.root.replaceChildren(h('h2', { id: 'config-title' }, 'Configuration'),
    h('p', { class: 'muted' }, 'Effective values and where each came from (secrets masked).'),
    table(['key', 'value', 'source'], rows, { id: 'config-table' }));
}
