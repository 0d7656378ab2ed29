// Thin client of the ops API. Every call sends the operator's bearer token (kept in sessionStorage
// so it dies with the tab) and unwraps the {code, message, data} envelope.

export interface Envelope<T = any> {
  code: string;
  message: string;
  data: T;
}

export interface ApiResult<T = any> {
  status: number;
  body: Envelope<T>;
  /** From Retry-After on a 429 or 503, in ms; 0 when absent. */
  retryAfterMs: number;
}

const TOKEN_KEY = 'cf-console-token';

export function token(): string {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t: string): void {
  if (t) sessionStorage.setItem(TOKEN_KEY, t.trim());
  else sessionStorage.removeItem(TOKEN_KEY);
}

function retryAfter(res: Response): number {
  const v = res.headers.get('Retry-After');
  if (!v) return 0;
  const s = Number(v);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : 0;
}

export async function call<T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResult<T>> {
  const h: Record<string, string> = { Accept: 'application/json', ...headers };
  if (token()) h['Authorization'] = 'Bearer ' + token();
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
  } catch (e) {
    return { status: 0, body: { code: 'NETWORK', message: 'The server cannot be reached', data: null as any }, retryAfterMs: 0 };
  }
  let parsed: Envelope<T>;
  try {
    parsed = await res.json();
  } catch {
    parsed = { code: 'BAD_RESPONSE', message: 'HTTP ' + res.status, data: null as any };
  }
  return { status: res.status, body: parsed, retryAfterMs: retryAfter(res) };
}

export const get = <T = any>(path: string) => call<T>('GET', path);

export function newIdempotencyKey(): string {
  if (crypto && 'randomUUID' in crypto) return (crypto as any).randomUUID();
  return Date.now().toString(36) + Math.random().toString(36).slice(2);
}
