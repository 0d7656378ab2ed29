// Tiny DOM helpers: the console is plain TypeScript, no framework.

import type { ApiResult } from './api';
import type { PageContext, PageResult } from './main';

type Child = Node | string | number | null | undefined | false;

/** Event handlers are set as properties (el.onclick = f), not listeners, so that patch() can hand
 *  the handler of a freshly rendered element to the element it keeps. */
export function h(tag: string, attrs: Record<string, any> = {}, ...children: (Child | Child[])[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') (el as any)[k.toLowerCase()] = v;
    else if (k === 'class') el.className = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }
  return el;
}

const HANDLERS = ['onclick', 'onsubmit', 'oninput', 'onchange', 'onkeydown'];

/** Brings `live` to look like `next` while keeping every node that did not change: a text node
 *  whose text is the same is the same node, so a selection (an id being copied) survives a poll.
 *  Elements are matched by position and tag; form fields keep what the user typed. */
export function patch(live: Node, next: Node): Node {
  if (live.nodeType !== next.nodeType || live.nodeName !== next.nodeName) {
    live.parentNode?.replaceChild(next, live);
    return next;
  }
  if (live.nodeType === Node.TEXT_NODE) {
    if (live.nodeValue !== next.nodeValue) live.nodeValue = next.nodeValue;
    return live;
  }
  if (!(live instanceof Element) || !(next instanceof Element)) return live;
  for (const a of [...live.attributes]) if (!next.hasAttribute(a.name)) live.removeAttribute(a.name);
  for (const a of [...next.attributes]) if (live.getAttribute(a.name) !== a.value) live.setAttribute(a.name, a.value);
  for (const k of HANDLERS) (live as any)[k] = (next as any)[k];
  const userEdits = live instanceof HTMLInputElement || live instanceof HTMLTextAreaElement || live instanceof HTMLSelectElement;
  if (userEdits) return live;
  patchChildren(live, [...next.childNodes]);
  return live;
}

/** Replaces the children of `parent` with `next`, in place where the shapes agree. */
export function patchChildren(parent: Node, next: Node[]): void {
  const live = [...parent.childNodes];
  next.forEach((n, i) => {
    if (i < live.length) patch(live[i], n);
    else parent.appendChild(n);
  });
  for (let i = next.length; i < live.length; i++) parent.removeChild(live[i]);
}

export function table(headers: string[], rows: Child[][], attrs: Record<string, any> = {}): HTMLElement {
  return h('table', attrs, h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))));
}

// -- time: one format everywhere, always UTC; relative times measured from the server's clock.

let serverOffsetMs = 0;

/** Called with the database clock an answer carried (nowMs): relative times use it, not the
 *  browser's clock, which may be minutes off. */
export function syncServerClock(nowMs: number | null | undefined): void {
  if (typeof nowMs === 'number' && nowMs > 0) serverOffsetMs = nowMs - Date.now();
}

export function serverNow(): number {
  return Date.now() + serverOffsetMs;
}

/** "2026-12-01 07:12:03 UTC" */
export function fmtTime(ms: number | null | undefined): string {
  if (!ms) return '—';
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

/** "250 ms", "4.2 s", "42 s", "7 min", "3.5 h", "2.1 d" */
export function fmtDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return Math.max(0, Math.round(ms)) + ' ms';
  if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
  const s = Math.round(ms / 1000);
  if (s < 90) return s + ' s';
  if (s < 5400) return Math.round(s / 60) + ' min';
  if (s < 172800) return (s / 3600).toFixed(1) + ' h';
  return (s / 86400).toFixed(1) + ' d';
}

/** Time since `ms` ("7 min"), from the server clock. */
export function age(ms: number | null | undefined): string {
  if (!ms) return '—';
  return fmtDuration(serverNow() - ms);
}

/** "in 40 s" / "3 min ago", from the server clock. */
export function relative(ms: number | null | undefined): string {
  if (!ms) return '—';
  const d = ms - serverNow();
  return d >= 0 ? 'in ' + fmtDuration(d) : fmtDuration(-d) + ' ago';
}

/** Relative and absolute: "in 40 s (2026-12-01 07:12:43 UTC)". */
export function when(ms: number | null | undefined): string {
  if (!ms) return '—';
  return `${relative(ms)} (${fmtTime(ms)})`;
}

/**
 * A change id shortened for lists: its last 8 characters. New ids are time-ordered (UUID version 7),
 * so their first characters are the time and repeat for every change of the same minute; the end is
 * random. The search box matches any part of an id, so what is shown can be searched for.
 */
export function shortId(id: string): string {
  return '…' + id.slice(-8);
}

export function link(href: string, text: string, attrs: Record<string, any> = {}): HTMLElement {
  return h('a', { href: '/console' + href, 'data-nav': '1', ...attrs }, text);
}

export function errorBox(status: number, message: string): HTMLElement {
  if (status === 429) return h('div', { class: 'error', role: 'status' }, 'Too many reads right now: the console slows down and retries on its own.');
  const hint = status === 401 ? ' — paste a valid operator token above.' : status === 403 ? ' — your account lacks the ops permission.' : '';
  return h('div', { class: 'error', role: 'alert' }, `${status || 'network'}: ${message}${hint}`);
}

/** An external error in one line: "503 · Service Unavailable · 2 min ago (… UTC)". */
export function errorLine(message: string | null | undefined, status: number | null | undefined, atMs: number | null | undefined): string {
  if (!message && !status) return '—';
  return [status ? String(status) : null, message || null, atMs ? when(atMs) : null].filter(Boolean).join(' · ');
}

/** A page's read failed: what is on screen stays (the poller marks it stale); only a first load,
 *  with nothing matching `shownSelector` in `into` yet, shows the error under `title`. */
export function failedRead(ctx: PageContext, r: ApiResult, title: string, shownSelector: string, into: HTMLElement = ctx.root): PageResult {
  if (!into.querySelector(shownSelector)) {
    const box = errorBox(r.status, r.body.message);
    if (into === ctx.root) ctx.show(h('h2', {}, title), box);
    else into.replaceChildren(box);
  }
  return { status: r.status, message: r.body.message, retryAfterMs: r.retryAfterMs };
}
