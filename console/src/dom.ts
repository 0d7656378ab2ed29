// Tiny DOM helpers: the console is plain TypeScript, no framework.

type Child = Node | string | number | null | undefined | false;

export function h(tag: string, attrs: Record<string, any> = {}, ...children: (Child | Child[])[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === 'class') el.className = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function table(headers: string[], rows: Child[][], attrs: Record<string, any> = {}): HTMLElement {
  return h('table', attrs, h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))));
}

export function fmtTime(ms: number | null | undefined): string {
  if (!ms) return '—';
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}

export function age(ms: number | null | undefined): string {
  if (!ms) return '—';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 90) return s + ' s';
  if (s < 5400) return Math.round(s / 60) + ' min';
  return Math.round(s / 3600) + ' h';
}

export function link(href: string, text: string, attrs: Record<string, any> = {}): HTMLElement {
  return h('a', { href: '/console' + href, 'data-nav': '1', ...attrs }, text);
}

export function errorBox(status: number, message: string): HTMLElement {
  const hint = status === 401 ? ' — paste a valid operator token above.' : status === 403 ? ' — your account lacks the ops permission.' : '';
  return h('div', { class: 'error', role: 'alert' }, `${status || 'network'}: ${message}${hint}`);
}
