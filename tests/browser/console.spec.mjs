// Browser scenarios of the ops console, run by console_browser_test (ctest, label e2e) with:
//   CONSOLE_URL  http://127.0.0.1:<port>/console/      OPS_TOKEN  operator bearer token
//   CONSOLE_DIR  the served copy of console/dist        SCENARIO   see `scenarios` at the end
//   SHOT_DIR     where each page's screenshot is written (the test's build tmp directory)
//   OP_ID, FAILED_ID, WAITING_ID, DELIVERY_ID, ...     the changes the C++ driver prepared
// Headless Debian chromium through playwright-core (never `npx playwright install`). Exit 0 = pass;
// any failure prints what was expected and exits 1. Waits are conditions, never fixed sleeps.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(path.resolve('console/package.json'));
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  console.error('FAIL: playwright-core is not installed in console/node_modules (run scripts/build-console)');
  process.exit(1);
}

const { CONSOLE_URL, OPS_TOKEN, CONSOLE_DIR, SCENARIO, OP_ID, SHOT_DIR } = process.env;
const env = process.env;
const TIMEOUT = 30000;

function fail(msg) {
  throw new Error(msg);
}

async function shot(page, name) {
  if (!SHOT_DIR) return;
  fs.mkdirSync(SHOT_DIR, { recursive: true });
  await page.screenshot({ path: path.join(SHOT_DIR, `${SCENARIO}-${name}.png`), fullPage: true });
}

/** Rows of a table as arrays of cell texts. */
async function rowsOf(page, selector) {
  return page.evaluate((sel) => [...document.querySelectorAll(sel + ' tbody tr')].map((r) => [...r.children].map((c) => c.textContent)), selector);
}

/** Waits until this tab's poller has refreshed `n` more times (window.cfPoll, main.ts). */
async function waitRefreshes(page, n) {
  const start = await page.evaluate(() => window.cfPoll.refreshes);
  await page.waitForFunction((want) => window.cfPoll.refreshes >= want, start + n);
}

async function withBrowser(fn) {
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cf-chromium-'));
  // A fresh profile per run (playwright takes it as the persistent context's directory).
  const context = await chromium.launchPersistentContext(userDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
  try {
    const page = context.pages()[0] ?? await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    page.on('pageerror', (e) => console.log('[page error]', e.message));
    await fn(page);
  } finally {
    await context.close();
    fs.rmSync(userDir, { recursive: true, force: true });
  }
}

async function signIn(page) {
  await page.goto(CONSOLE_URL);
  await page.fill('#token', OPS_TOKEN);
  await page.click('#token-save');
  await page.waitForFunction(() => document.querySelector('#who')?.textContent?.startsWith('operator: '));
}

async function retrigger(page) {
  if (!OP_ID) fail('OP_ID is required');
  await signIn(page);
  // Needs attention: the stuck change is listed, with its step and what it waits for.
  const stuckLink = page.locator(`#attention-table a[data-op="${OP_ID}"]`);
  await stuckLink.waitFor();
  const row = await stuckLink.locator('xpath=ancestor::tr').innerText();
  if (!row.includes('CREATE_PIPELINE_PENDING')) fail('attention row does not show the step: ' + row);
  if (!row.includes('Outcome unknown')) fail('attention row does not say why: ' + row);
  await stuckLink.click();
  // Detail: the timeline shows how it got stuck.
  await page.waitForURL(`**/console/operations/${OP_ID}`);
  await page.locator('#timeline').waitFor();
  await page.waitForFunction(() => document.querySelector('#timeline')?.textContent?.includes('CREATE_PIPELINE_PENDING'));
  const stepBefore = await page.locator('#op-step').innerText();
  if (!stepBefore.includes('CREATE_PIPELINE_PENDING')) fail('step before: ' + stepBefore);
  // Re-trigger with confirmation.
  await page.click('button[data-action="retrigger"]');
  await page.locator('#confirm-dialog').waitFor();
  await page.fill('#action-reason', 'runner restarted');
  await page.click('#confirm-yes');
  await page.waitForFunction(() => document.querySelector('#action-outcome')?.textContent?.includes('200 OK'));
  const outcome = await page.locator('#action-outcome').innerText();
  if (!outcome.includes('CREATE_MR_OPENED')) fail('outcome does not name the new step: ' + outcome);
  // The live timeline (polled) shows the operator edge: the step advanced.
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('#timeline tbody tr')].map((r) => [...r.children].map((c) => c.textContent));
    return rows.some((c) => c[1] === 'CREATE_PIPELINE_PENDING' && c[2] === 'CREATE_MR_OPENED' && c[7] === 'operator:alice');
  });
  // And the audit page lists the action under the server-resolved operator.
  await page.click('nav a[href="/console/audit"]');
  await page.waitForFunction((id) => [...document.querySelectorAll('#audit-table tbody tr')]
    .some((r) => r.textContent.includes(id) && r.textContent.includes('retrigger') && r.children[1].textContent === 'alice'), OP_ID);
  console.log('PASS retrigger: needs attention -> stuck change -> timeline -> re-trigger -> CREATE_MR_OPENED, audited');
}

async function staleAsset(page) {
  let loads = 0;
  page.on('load', () => loads++);
  await signIn(page);
  await page.locator('#attention-counts').waitFor();
  // A release removed the lazily loaded config chunk after this page loaded.
  const assets = path.join(CONSOLE_DIR, 'assets');
  const chunk = fs.readdirSync(assets).find((f) => /^config-.*\.js$/.test(f));
  if (!chunk) fail('no config-*.js chunk in ' + assets);
  fs.rmSync(path.join(assets, chunk));
  const loadsBefore = loads;
  await page.click('#nav-config');
  // 1) One automatic reload with a cache-busting parameter...
  await page.waitForURL(/[?&]_r=/);
  await page.waitForLoadState('load');
  const stamp = await page.evaluate(() => sessionStorage.getItem('cf-console-auto-reload-at'));
  if (!stamp) fail('the automatic reload was not recorded in sessionStorage');
  // 2) ...after which the same failure (the reloaded page routes to /config again) shows the button.
  await page.locator('#stale-refresh').waitFor({ state: 'visible' });
  const label = await page.locator('#stale-refresh').innerText();
  if (label !== 'Refresh page') fail('button label: ' + label);
  const url = page.url();
  // No loop: the page is still the one reload produced, and exactly one extra load happened.
  // (Checked after the button is visible: the guard decides synchronously on the failure.)
  await page.waitForFunction(() => document.readyState === 'complete');
  if (page.url() !== url) fail('the page navigated again after showing the button');
  if (loads - loadsBefore !== 1) fail(`expected exactly one automatic reload, saw ${loads - loadsBefore}`);
  console.log('PASS stale-asset: reloaded once with a cache-buster, then offered "Refresh page"');
}

/** The attention view lists a failed change, an overdue approval and unapplied callbacks, each
 *  with its reason in words; a selection (an id being copied) survives the polls. */
async function attention(page) {
  await signIn(page);
  const failedRow = page.locator(`#attention-table a[data-op="${env.FAILED_ID}"]`).first().locator('xpath=ancestor::tr');
  const waitingRow = page.locator(`#attention-table a[data-op="${env.WAITING_ID}"]`).first().locator('xpath=ancestor::tr');
  await failedRow.waitFor();
  await waitingRow.waitFor();
  const failedText = await failedRow.innerText();
  for (const want of ['Failed: waits for an operator', 'APPROVAL_SUBMIT_FAILED', 'an operator', '422', 'UTC']) {
    if (!failedText.includes(want)) fail(`failed row lacks "${want}": ${failedText}`);
  }
  const waitingText = await waitingRow.innerText();
  for (const want of ['Approval overdue', 'APPROVAL_SENT', 'approver', 'deadline', 'in ', 'UTC']) {
    if (!waitingText.includes(want)) fail(`overdue approval row lacks "${want}": ${waitingText}`);
  }
  const rows = await rowsOf(page, '#attention-table');
  const deploy = rows.find((c) => c.join(' ').includes(env.DELIVERY_ID));
  if (!deploy) fail('the ignored deploy callback is not listed: ' + JSON.stringify(rows));
  if (!deploy[1].includes('Callback not applied') || !deploy.join(' ').includes('ignored as stale')) fail('callback row: ' + deploy.join(' | '));
  const refused = rows.find((c) => c.join(' ').includes(env.APPROVAL_DELIVERY_ID));
  if (!refused) fail('the ignored approval callback is not listed: ' + JSON.stringify(rows));
  // Counts per reason: each listed reason has a non-zero card.
  for (const reason of ['FAILED', 'OVERDUE_APPROVAL', 'CALLBACK_UNAPPLIED']) {
    const n = Number(await page.locator(`#attention-counts [data-reason="${reason}"] .n`).innerText());
    if (!(n >= 1)) fail(`count card ${reason} shows ${n}`);
  }
  await shot(page, 'attention');
  // Select the failed change's id as an operator copying it would; polls must not destroy it.
  await page.evaluate((id) => {
    const a = document.querySelector(`#attention-table a[data-op="${id}"]`);
    const range = document.createRange();
    range.selectNodeContents(a);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }, env.FAILED_ID);
  await waitRefreshes(page, 2);
  const selected = await page.evaluate(() => window.getSelection().toString());
  if (selected !== env.FAILED_ID) fail(`the selection did not survive the refreshes: "${selected}"`);
  // The filter by reason shows only that reason.
  await page.click('#attention-counts [data-reason="OVERDUE_APPROVAL"]');
  await page.waitForFunction(() => [...document.querySelectorAll('#attention-table tbody tr')].every((r) => r.children[1].textContent.includes('Approval overdue')));
  console.log('PASS attention: failed change, overdue approval, unapplied callbacks listed with reasons; selection kept across polls');
}

/** The change page after two 503s on MR creation: attempts and the last error of that step,
 *  durations, and every callback (approval and deploy) with its outcome. */
async function changePage(page) {
  await signIn(page);
  await page.goto(CONSOLE_URL + 'operations/' + OP_ID);
  await page.locator('#step-attempts').waitFor();
  await page.waitForFunction(() => document.querySelector('#op-phase')?.textContent === 'VALIDATED');
  const attempts = await rowsOf(page, '#step-attempts');
  const create = attempts.find((c) => c[0] === 'CREATE_STARTED');
  if (!create) fail('no CREATE_STARTED row in the attempts: ' + JSON.stringify(attempts));
  if (create[1] !== '2') fail('failed attempts of CREATE_STARTED: ' + create[1]);
  if (!create[2].startsWith('503')) fail('last error of CREATE_STARTED does not show its status: ' + create[2]);
  if (!create[2].includes('UTC')) fail('last error has no UTC time: ' + create[2]);
  const timeline = await rowsOf(page, '#timeline');
  if (!timeline.some((c) => c[2] === 'CREATE_STARTED' && c[4] === '2' && /\d+ (ms|s|min)/.test(c[3]))) fail('timeline lacks the attempts or the time in CREATE_STARTED: ' + JSON.stringify(timeline));
  const callbacks = await rowsOf(page, '#callbacks');
  if (!callbacks.some((c) => c[1] === 'deploy' && c[3] === 'APPLIED')) fail('the deploy callback is not listed: ' + JSON.stringify(callbacks));
  if (!callbacks.some((c) => c[1] === 'approval' && c[3] === 'APPLIED')) fail('the approval callback is not listed: ' + JSON.stringify(callbacks));
  const facts = await page.locator('#op-facts').innerText();
  for (const want of ['DONE', 'total time', '(ended)', 'merge request', 'approval id']) if (!facts.includes(want)) fail(`facts lack "${want}": ${facts}`);
  if (!(await page.locator('#op-mr').getAttribute('href'))) fail('no MR link');
  await shot(page, 'change');
  console.log('PASS change page: 2 failed attempts with 503 and when, durations, approval and deploy callbacks');
}

/** Three tabs poll at a short interval under small read limits: none shows a 429, and an action
 *  (its own bucket) is still accepted; its reason is validated in the dialog first. */
async function tabs(page) {
  const context = page.context();
  const pages = [page, await context.newPage(), await context.newPage()];
  for (const p of pages) {
    p.setDefaultTimeout(TIMEOUT);
    await signIn(p);
    await p.locator('#attention-counts').waitFor();
  }
  for (const p of pages) await waitRefreshes(p, 4);
  for (const [i, p] of pages.entries()) {
    const shown = await p.evaluate(() => document.body.innerText);
    // What a rate-limited console would show: its own words, the error code, or a bare status. Not
    // any "429" in the text: an operation id or a time on the page may contain those digits.
    const limitShown = ['Too many reads', 'asked this console to slow down', 'RATE_LIMITED'].find((w) => shown.includes(w)) ??
      shown.match(/\b429\b/)?.[0];
    if (limitShown) fail(`tab ${i} shows a rate limit ("${limitShown}"): ${shown.slice(0, 400)}`);
    const poll = await p.evaluate(() => window.cfPoll);
    if (poll.rateLimited !== 0) fail(`tab ${i} was rate limited ${poll.rateLimited} times`);
  }
  // An action from the first tab: force-fail the waiting change; the reason is required.
  await page.goto(CONSOLE_URL + 'operations/' + env.WAITING_ID);
  await page.click('button[data-action="fail"]');
  await page.locator('#confirm-dialog').waitFor();
  if (!(await page.locator('#confirm-yes').getAttribute('class'))?.includes('destructive')) fail('force failure is not styled destructive');
  await page.click('#confirm-yes');
  await page.locator('#reason-invalid').waitFor({ state: 'visible' });
  if (!(await page.locator('#confirm-dialog').isVisible())) fail('the dialog closed without a reason');
  await page.fill('#action-reason', 'approver left the company');
  await page.click('#confirm-yes');
  await page.waitForFunction(() => document.querySelector('#action-outcome')?.textContent?.includes('200 OK'));
  await shot(page, 'action-accepted');

  // A hidden tab does not poll, and refreshes when shown again.
  const hidden = pages[2];
  const setHidden = (p, value) => p.evaluate((v) => {
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => v });
    document.dispatchEvent(new Event('visibilitychange'));
  }, value);
  await setHidden(hidden, true);
  await hidden.waitForFunction(() => window.cfPoll.skippedHidden >= 1);
  const frozenAt = await hidden.evaluate(() => window.cfPoll.refreshes);
  await waitRefreshes(pages[1], 3);
  const whileHidden = await hidden.evaluate(() => window.cfPoll.refreshes);
  if (whileHidden !== frozenAt) fail(`a hidden tab kept polling: ${frozenAt} -> ${whileHidden}`);
  await setHidden(hidden, false);
  await waitRefreshes(hidden, 1);

  // The operator's read budget is used up elsewhere (another client with the same identity): the
  // tab keeps its data, says since when it is stale, backs off for the server's Retry-After, and
  // recovers on its own. The words never show a raw 429.
  await page.goto(CONSOLE_URL);  // the attention page, signed in (sessionStorage survives)
  await page.locator('#attention-counts').waitFor();
  const attentionUrl = new URL('/api/v1/ops/attention', CONSOLE_URL);
  let retryAfter = null;
  for (let i = 0; i < 500 && retryAfter === null; i++) {
    const res = await fetch(attentionUrl, { headers: { Authorization: 'Bearer ' + OPS_TOKEN } });
    if (res.status === 429) retryAfter = Number(res.headers.get('Retry-After'));
  }
  if (retryAfter === null) fail('the read limit was never reached');
  // The budget refills while the tab waits for its next poll (a second or more on a busy machine):
  // keep it used up until the tab's own poll has met the limit.
  const drainUntil = Date.now() + 30000;
  while (!(await page.evaluate(() => window.cfPoll.rateLimited >= 1)) && Date.now() < drainUntil) {
    for (let i = 0; i < 50; i++) {
      const res = await fetch(attentionUrl, { headers: { Authorization: 'Bearer ' + OPS_TOKEN } });
      if (res.status === 429) break;
    }
    await page.waitForTimeout(50);
  }
  await page.waitForFunction(() => window.cfPoll.rateLimited >= 1 && document.querySelector('#freshness')?.classList.contains('stale'));
  const banner = await page.locator('#freshness').innerText();
  if (!banner.includes('Stale since') || !banner.includes('UTC') || banner.includes('429')) fail('stale banner: ' + banner);
  const delay = await page.evaluate(() => window.cfPoll.delayMs);
  if (delay < 2000) fail(`after a 429 the next refresh is due in ${delay} ms: no back-off`);
  if (!(await page.locator('#attention-counts').isVisible())) fail('the last good data was not kept on screen');
  await shot(page, 'rate-limited');
  await page.waitForFunction(() => !document.querySelector('#freshness')?.classList.contains('stale') && document.querySelector('#attention-table, #attention-empty'),
    null, { timeout: 90000 });
  console.log('PASS tabs: three tabs polled without a 429 shown; the action was accepted after its reason was given; ' +
    `a hidden tab paused; a 429 (Retry-After ${retryAfter} s) backed off to ${delay} ms under a stale banner and recovered`);
}

/** Honest actions: a re-trigger after a deterministic pipeline failure is warned; an action refused
 *  because the change moved on is shown as refused and is in the audit log. */
async function actions(page) {
  await signIn(page);
  await page.goto(CONSOLE_URL + 'operations/' + env.PIPELINE_FAILED_ID);
  await page.locator('#actions').waitFor();
  await page.click('button[data-action="retrigger"]');
  await page.locator('#confirm-dialog').waitFor();
  const warning = await page.locator('#action-warning').innerText();
  if (!warning.includes('reuses its failed pipeline')) fail('the re-trigger is not warned: ' + warning);
  const effect = await page.locator('#action-effect').innerText();
  if (!effect.includes('CREATE_STARTED')) fail('the dialog does not say what will happen: ' + effect);
  await shot(page, 'retrigger-warning');
  await page.click('#confirm-no');
  // Refused: the dialog was opened on version N, then the change moved on (closed elsewhere).
  await page.click('button[data-action="close"]');
  await page.locator('#confirm-dialog').waitFor();
  const closed = await fetch(new URL(`/api/v1/ops/operations/${env.PIPELINE_FAILED_ID}/close`, CONSOLE_URL), {
    method: 'POST', headers: { Authorization: 'Bearer ' + OPS_TOKEN, 'Content-Type': 'application/json' }, body: '{"reason":"closed from another desk"}' });
  if (closed.status !== 200) fail('closing from the side answered ' + closed.status);
  await page.fill('#action-reason', 'duplicate of another change');
  await page.click('#confirm-yes');
  await page.waitForFunction(() => document.querySelector('#action-outcome')?.classList.contains('error'));
  const outcome = await page.locator('#action-outcome').innerText();
  if (!outcome.includes('409') || !outcome.includes('audit')) fail('the refusal is not shown as such: ' + outcome);
  await shot(page, 'refused');
  await page.click('nav a[href="/console/audit"]');
  await page.waitForFunction((id) => [...document.querySelectorAll('#audit-table tbody tr')].some((r) =>
    r.textContent.includes(id) && r.children[2].textContent === 'close' && r.children[4].textContent !== 'OK' && r.children[1].textContent === 'alice'), env.PIPELINE_FAILED_ID);
  await shot(page, 'audit');
  console.log('PASS actions: deterministic re-trigger warned; a refused close shown and audited');
}

/** Ids of the changes table's rows, in order. */
async function listedIds(page) {
  return page.evaluate(() => [...document.querySelectorAll('#op-table tbody tr a.op-link')].map((a) => a.dataset.op));
}

/** Submits the filter form and waits for the list of the new URL. */
async function applyFilter(page, expectUrlPart) {
  await page.click('#op-filters button[type="submit"]');
  await page.waitForFunction((part) => location.search.includes(part) || part === '', expectUrlPart);
  await page.waitForFunction(() => !!document.querySelector('#op-total'));
  await waitRefreshes(page, 1);
}

async function lists(page) {
  const hanging = [env.HANG_A, env.HANG_B];
  await signIn(page);
  await page.goto(CONSOLE_URL + 'operations?q=browser-list');
  await page.locator('#op-table').waitFor();
  // Active only by default: the ended change is not listed, the two waiting ones are.
  let ids = await listedIds(page);
  if (ids.includes(env.DONE_ID)) fail('an ended change is listed by default: ' + ids);
  for (const id of hanging) if (!ids.includes(id)) fail('a waiting change is missing: ' + id + ' in ' + ids);
  const total = await page.locator('#op-total').innerText();
  if (!total.startsWith('2 change(s) match (not ended only)')) fail('the total does not say what it counts: ' + total);
  // The reason column says in words what each waits for.
  const reasons = (await rowsOf(page, '#op-table')).map((r) => r[6]);
  const places = (await rowsOf(page, '#op-table')).map((r) => r[3]);
  if (!places.every((p) => p === 'config/changes → main')) fail('the repository and branch are not shown: ' + JSON.stringify(places));
  if (!reasons.every((r) => r && r.length > 10 && r !== 'ended')) fail('a waiting change has no reason: ' + JSON.stringify(reasons));
  await shot(page, 'active');
  // All changes, oldest update first, then newest first: the same rows in reverse.
  await page.uncheck('#filter-active');
  await applyFilter(page, 'active=0');
  const oldest = await listedIds(page);
  if (oldest.length !== 3 || !oldest.includes(env.DONE_ID)) fail('all three changes expected: ' + oldest);
  await page.selectOption('#filter-order', 'newest');
  await applyFilter(page, 'order=newest');
  const newest = await listedIds(page);
  if (JSON.stringify(newest) !== JSON.stringify([...oldest].reverse())) fail(`newest first is not the reverse: ${oldest} vs ${newest}`);
  // The phase dropdown.
  await page.selectOption('#filter-phase', 'VALIDATED');
  await applyFilter(page, 'phase=VALIDATED');
  ids = await listedIds(page);
  if (JSON.stringify(ids) !== JSON.stringify([env.DONE_ID])) fail('phase VALIDATED should list only the ended change: ' + ids);
  await shot(page, 'filtered');
  // A bulk re-trigger over "waiting, title browser-list": the dry run's count comes first.
  await page.goto(CONSOLE_URL + 'operations?q=browser-list-hang');
  await page.locator('#op-table').waitFor();
  await page.click('#bulk summary');
  await page.selectOption('#bulk-action', 'retrigger');
  if (await page.locator('#bulk-apply').isVisible()) fail('the bulk action is offered before its dry run');
  await page.click('#bulk-count');
  await page.waitForFunction(() => document.querySelector('#bulk-result')?.textContent?.includes('match'));
  const dry = await page.locator('#bulk-result').innerText();
  if (!dry.includes('2 change(s) match this filter; 2 can be moved') || !dry.includes('Nothing has been done yet')) fail('dry run: ' + dry);
  const before = await Promise.all(hanging.map((id) => fetch(new URL('/api/v1/ops/operations/' + id, CONSOLE_URL),
    { headers: { Authorization: 'Bearer ' + OPS_TOKEN } }).then((r) => r.json())));
  if (!before.every((b) => b.data.step.name === 'CREATE_PIPELINE_PENDING')) fail('the dry run moved something');
  await shot(page, 'bulk-dry-run');
  await page.click('#bulk-apply');
  await page.waitForFunction(() => document.querySelector('#bulk-result')?.textContent?.startsWith('Done'));
  const done = await page.locator('#bulk-result').innerText();
  if (!done.includes('Done over 2 matching change(s)')) fail('bulk result: ' + done);
  await shot(page, 'bulk-done');
  console.log('PASS lists: active-only default, order toggle, phase dropdown, reasons, bulk dry run first');
}

async function notifications(page) {
  await signIn(page);
  await page.goto(CONSOLE_URL + 'notifications');
  await page.locator('#notify-table').waitFor();
  // The subscriber answers 404: its deliveries stay PENDING, with their attempts and last answer shown.
  await page.waitForFunction((id) => [...document.querySelectorAll('#notify-table tbody tr')].some((r) =>
    r.querySelector('a.op-link')?.dataset.op === id && r.children[3].textContent === 'PENDING' &&
    Number(r.children[5].textContent) >= 1 && r.children[6].textContent.includes('404')), env.OP_ID);
  const counts = await page.locator('#notify-counts').innerText();
  if (!/PENDING [1-9]/.test(counts)) fail('the pending count is not shown: ' + counts);
  await shot(page, 'pending');
  await page.click('#notify-counts a[data-state="DELIVERED"]');
  await page.waitForFunction(() => location.search.includes('state=DELIVERED'));
  await page.waitForFunction(() => !!document.querySelector('#notify-table') &&
    [...document.querySelectorAll('#notify-table tbody tr')].every((r) => r.children[3].textContent === 'DELIVERED'));
  console.log('PASS notifications: a failing subscriber\'s deliveries listed PENDING with attempts and the 404; state filter');
}

async function preview(page) {
  await signIn(page);
  await page.goto(CONSOLE_URL + 'preview');
  await page.locator('#preview-body').waitFor();
  const body = { subject: 'svc-owner', target: 'svc-b-preview', title: 'browser preview', files: [
    { path: 'config/browser-preview.yaml', action: 'upsert', content: 'timeout: 30\n' }] };
  await page.fill('#preview-body', JSON.stringify(body));
  await page.click('#preview-run');
  await page.locator('#preview-verdict').waitFor();
  const verdict = await page.locator('#preview-verdict').innerText();
  if (!verdict.startsWith('Valid')) fail('the preview is not valid: ' + verdict);
  const diff = await page.locator('pre.diff').innerText();
  if (!diff.includes('+timeout: 30') || !diff.includes('/dev/null')) fail('the diff of a new file is not shown: ' + diff);
  await shot(page, 'diff');
  await page.fill('#preview-body', '{"subject": ');
  await page.click('#preview-run');
  await page.waitForFunction(() => document.querySelector('#preview-result')?.textContent?.includes('not JSON'));
  console.log('PASS preview: a new file previewed as valid with its diff; a broken body refused in the page');
}

const scenarios = { preview, notifications, lists, retrigger, 'stale-asset': staleAsset, attention, 'change-page': changePage, tabs, actions };
if (!scenarios[SCENARIO]) {
  console.error('FAIL: unknown SCENARIO ' + SCENARIO);
  process.exit(1);
}
try {
  await withBrowser(scenarios[SCENARIO]);
  process.exit(0);
} catch (e) {
  console.error('FAIL ' + SCENARIO + ': ' + (e && e.stack ? e.stack : e));
  process.exit(1);
}
