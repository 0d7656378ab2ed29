// changeflow ops console: a small single-page app under /console/. Path routes (deep links work:
// the server answers navigations with the app shell), live updates by polling the ops API.
//
// Polling: one ops read per refresh of a page; no refresh while the tab is hidden or a dialog is
// open; a 429 backs off for at least its Retry-After (doubling up to a minute); a failed refresh
// keeps the last good data on screen under a "stale since" banner; every refresh patches the page
// in place (patch() in dom.ts), so a selection or an open <details> survives it.

import './style.css';
import { get, setToken, token } from './api';
import { fmtTime, h, patchChildren } from './dom';
import { renderAttention } from './pages/attention';
import { renderOverview } from './pages/overview';
import { renderOperations } from './pages/operations';
import { renderOperation } from './pages/operation';
import { renderAudit } from './pages/audit';
import { renderNotifications } from './pages/notifications';
import { renderPreview } from './pages/preview';
import { renderBatches } from './pages/batches';

declare global {
  interface Window {
    cfAssetFailed?: (what: string) => void;
    /** For tests and the curious: what the poller did on this tab. */
    cfPoll?: { refreshes: number; rateLimited: number; skippedHidden: number; delayMs: number };
  }
}

export interface PageContext {
  /** The page's container; pages render with show(), which patches it in place. */
  root: HTMLElement;
  params: Record<string, string>;
  query: URLSearchParams;
  /** True while this page is still the one shown (polls stop after navigation). */
  alive: () => boolean;
  show: (...nodes: (Node | null | undefined | false)[]) => void;
}

/** What a page's one read answered: the poller backs off, or marks the data stale, from it. */
export interface PageResult {
  status: number;
  message?: string;
  retryAfterMs?: number;
}

type Page = (ctx: PageContext) => Promise<PageResult | void>;

let pollMs = 5000;
/** The server's console.poll_ms (the attention answer carries it). */
export function setPollInterval(ms: unknown): void {
  if (typeof ms === 'number' && ms >= 1000) pollMs = ms;
}

const routes: { pattern: RegExp; keys: string[]; page: Page; poll: boolean }[] = [
  { pattern: /^\/?$/, keys: [], page: renderAttention, poll: true },
  { pattern: /^\/overview\/?$/, keys: [], page: renderOverview, poll: true },
  { pattern: /^\/operations\/?$/, keys: [], page: renderOperations, poll: true },
  { pattern: /^\/operations\/([0-9a-fA-F-]{36})\/?$/, keys: ['id'], page: renderOperation, poll: true },
  { pattern: /^\/batches\/?$/, keys: [], page: renderBatches, poll: true },
  { pattern: /^\/audit\/?$/, keys: [], page: renderAudit, poll: true },
  { pattern: /^\/notifications\/?$/, keys: [], page: renderNotifications, poll: true },
  { pattern: /^\/preview\/?$/, keys: [], page: renderPreview, poll: false },
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
let wakeOnVisible: (() => void) | null = null;
const stats = { refreshes: 0, rateLimited: 0, skippedHidden: 0, delayMs: 0 };
window.cfPoll = stats;

function currentPath(): string {
  const p = location.pathname.replace(/^\/console/, '');
  return p === '' ? '/' : p;
}

// -- the "stale since" banner: the last good data stays on screen, marked.
let lastGoodAt = 0;
let staleSince = 0;

function showFreshness(ok: boolean, why: string, nextInMs: number): void {
  const el = document.getElementById('freshness');
  if (!el) return;
  if (ok) {
    staleSince = 0;
    lastGoodAt = Date.now();
    el.className = 'freshness muted';
    el.textContent = 'updated ' + fmtTime(lastGoodAt);
    return;
  }
  if (!staleSince) staleSince = Date.now();
  el.className = 'freshness stale';
  el.setAttribute('role', 'status');
  el.textContent = `Stale since ${fmtTime(staleSince)}: ${why}. Showing data from ${lastGoodAt ? fmtTime(lastGoodAt) : '—'}; ` +
    `next try in ${Math.round(nextInMs / 1000)} s.`;
}

async function route(): Promise<void> {
  const my = ++generation;
  if (pollTimer) window.clearTimeout(pollTimer);
  wakeOnVisible = null;
  staleSince = 0;
  const main = document.getElementById('page')!;
  const path = currentPath();
  for (const r of routes) {
    const m = path.match(r.pattern);
    if (!m) continue;
    const params: Record<string, string> = {};
    r.keys.forEach((k, i) => (params[k] = m[i + 1]));
    const ctx: PageContext = {
      root: main, params, query: new URLSearchParams(location.search), alive: () => my === generation,
      show: (...nodes) => patchChildren(main, nodes.filter(Boolean) as Node[]),
    };
    let backoffMs = 0;
    const schedule = (ms: number) => {
      stats.delayMs = ms;
      if (r.poll && ctx.alive()) pollTimer = window.setTimeout(tick, ms);
    };
    const tick = async () => {
      if (!ctx.alive()) return;
      // A hidden tab does not poll; it refreshes as soon as it is shown again.
      if (document.hidden) {
        stats.skippedHidden++;
        wakeOnVisible = () => void tick();
        return;
      }
      // The operator is deciding on what a dialog shows: no refresh under it.
      if (document.querySelector('dialog[open]')) return schedule(pollMs);
      let result: PageResult | void;
      try {
        stats.refreshes++;
        result = await r.page(ctx);
      } catch (e) {
        result = { status: -1, message: String(e) };
      }
      if (!ctx.alive()) return;
      if (!result || result.status === 200) {
        backoffMs = 0;
        showFreshness(true, '', 0);
        return schedule(pollMs);
      }
      if (result.status === 429 || result.status === 503) {
        if (result.status === 429) stats.rateLimited++;
        backoffMs = Math.min(60000, Math.max(result.retryAfterMs ?? 0, backoffMs ? backoffMs * 2 : pollMs * 2));
        showFreshness(false, result.status === 429 ? 'the server asked this console to slow down' : 'the server is busy', backoffMs);
        return schedule(backoffMs);
      }
      showFreshness(false, `the last refresh failed (${result.status <= 0 ? 'network' : result.status}${result.message ? ': ' + result.message : ''})`, pollMs);
      schedule(pollMs);
    };
    main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    await tick();
    markActiveNav();
    return;
  }
  main.replaceChildren(h('h2', {}, 'Not found'), h('p', {}, 'No console page at ' + path));
}

document.addEventListener('visibilitychange', () => {
  if (document.hidden || !wakeOnVisible) return;
  const wake = wakeOnVisible;
  wakeOnVisible = null;
  wake();
});

export function navigate(href: string): void {
  history.pushState(null, '', href);
  void route();
}

/** Refreshes the current page now (after an action). */
export function refreshNow(): void {
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
    h('a', { href: '/console/', 'data-nav': '1' }, 'Needs attention'),
    h('a', { href: '/console/overview', 'data-nav': '1' }, 'Overview'),
    h('a', { href: '/console/operations', 'data-nav': '1' }, 'Changes'),
    h('a', { href: '/console/batches', 'data-nav': '1' }, 'Batches'),
    h('a', { href: '/console/notifications', 'data-nav': '1' }, 'Notifications'),
    h('a', { href: '/console/preview', 'data-nav': '1' }, 'Preview'),
    h('a', { href: '/console/audit', 'data-nav': '1' }, 'Audit'),
    h('a', { href: '/console/config', 'data-nav': '1', id: 'nav-config' }, 'Config'));
  const app = document.getElementById('app')!;
  app.replaceChildren(
    h('header', {}, h('h1', {}, 'changeflow ops'), nav, h('div', { class: 'token' }, input, save, who)),
    h('div', { id: 'freshness', class: 'freshness muted' }, ''),
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
