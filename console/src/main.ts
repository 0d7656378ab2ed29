// changeflow ops console: a small single-page app under /console/. Path routes (deep links work:
// the server answers navigations with the app shell), live updates by polling the ops API.

import './style.css';
import { get, setToken, token } from './api';
import { h } from './dom';
import { renderOverview } from './pages/overview';
import { renderOperations } from './pages/operations';
import { renderOperation } from './pages/operation';
import { renderAudit } from './pages/audit';
import { renderBatches } from './pages/batches';

declare global {
  interface Window {
    cfAssetFailed?: (what: string) => void;
  }
}

export interface PageContext {
  /** Re-rendered on each poll; pages replace its content. */
  root: HTMLElement;
  params: Record<string, string>;
  query: URLSearchParams;
  /** True while this page is still the one shown (polls stop after navigation). */
  alive: () => boolean;
}

type Page = (ctx: PageContext) => Promise<void>;

const POLL_MS = 2000;

const routes: { pattern: RegExp; keys: string[]; page: Page; poll: boolean }[] = [
  { pattern: /^\/?$/, keys: [], page: renderOverview, poll: true },
  { pattern: /^\/operations\/?$/, keys: [], page: renderOperations, poll: true },
  { pattern: /^\/operations\/([0-9a-fA-F-]{36})\/?$/, keys: ['id'], page: renderOperation, poll: true },
  { pattern: /^\/batches\/?$/, keys: [], page: renderBatches, poll: true },
  { pattern: /^\/audit\/?$/, keys: [], page: renderAudit, poll: true },
  // Lazy chunk: the config page loads on demand (and shows the stale-asset recovery in action).
  {
    pattern: /^\/config\/?$/,
    keys: [],
    poll: false,
    page: async (ctx) => {
      let mod: typeof import('./pages/config');
      try {
        mod = await import('./pages/config');
      } catch (e) {
        window.cfAssetFailed?.('config chunk');
        ctx.root.replaceChildren(h('div', { class: 'error' }, 'Could not load this page.'));
        return;
      }
      await mod.renderConfig(ctx);
    },
  },
];

let generation = 0;
let pollTimer: number | undefined;

function currentPath(): string {
  const p = location.pathname.replace(/^\/console/, '');
  return p === '' ? '/' : p;
}

async function route(): Promise<void> {
  const my = ++generation;
  if (pollTimer) window.clearTimeout(pollTimer);
  const main = document.getElementById('page')!;
  const path = currentPath();
  for (const r of routes) {
    const m = path.match(r.pattern);
    if (!m) continue;
    const params: Record<string, string> = {};
    r.keys.forEach((k, i) => (params[k] = m[i + 1]));
    const ctx: PageContext = { root: main, params, query: new URLSearchParams(location.search), alive: () => my === generation };
    const tick = async () => {
      if (!ctx.alive()) return;
      try {
        await r.page(ctx);
      } finally {
        if (r.poll && ctx.alive()) pollTimer = window.setTimeout(tick, POLL_MS);
      }
    };
    main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    await tick();
    markActiveNav();
    return;
  }
  main.replaceChildren(h('h2', {}, 'Not found'), h('p', {}, 'No console page at ' + path));
}

export function navigate(href: string): void {
  history.pushState(null, '', href);
  void route();
}

function markActiveNav(): void {
  document.querySelectorAll('nav a').forEach((a) => {
    const href = (a as HTMLAnchorElement).pathname.replace(/^\/console/, '') || '/';
    const here = currentPath();
    a.classList.toggle('active', href === '/' ? here === '/' : here.startsWith(href));
  });
}

async function refreshWho(el: HTMLElement): Promise<void> {
  if (!token()) {
    el.textContent = 'not signed in';
    return;
  }
  const r = await get('/api/v1/ops/whoami');
  el.textContent = r.status === 200 ? 'operator: ' + r.body.data.operator : `token refused (${r.status})`;
}

function shell(): void {
  const who = h('span', { id: 'who', class: 'muted' }, '');
  const input = h('input', { id: 'token', type: 'password', placeholder: 'operator bearer token', autocomplete: 'off', size: 28 }) as HTMLInputElement;
  input.value = token();
  const save = h('button', {
    id: 'token-save',
    type: 'button',
    onclick: () => {
      setToken(input.value);
      void refreshWho(who);
      void route();
    },
  }, 'Use token');
  const nav = h('nav', {},
    h('a', { href: '/console/', 'data-nav': '1' }, 'Overview'),
    h('a', { href: '/console/operations', 'data-nav': '1' }, 'Operations'),
    h('a', { href: '/console/batches', 'data-nav': '1' }, 'Batches'),
    h('a', { href: '/console/audit', 'data-nav': '1' }, 'Audit'),
    h('a', { href: '/console/config', 'data-nav': '1', id: 'nav-config' }, 'Config'));
  const app = document.getElementById('app')!;
  app.replaceChildren(
    h('header', {}, h('h1', {}, 'changeflow ops'), nav, h('div', { class: 'token' }, input, save, who)),
    h('main', { id: 'page' }));
  void refreshWho(who);
}

document.addEventListener('click', (ev) => {
  const a = (ev.target as HTMLElement).closest('a[data-nav]') as HTMLAnchorElement | null;
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  navigate(a.pathname + a.search);
});
window.addEventListener('popstate', () => void route());

shell();
void route();
