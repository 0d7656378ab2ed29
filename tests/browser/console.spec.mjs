// Browser scenarios of the ops console, run by console_browser_test (ctest, label e2e) with:
//   CONSOLE_URL  http://127.0.0.1:<port>/console/      OPS_TOKEN  operator bearer token
//   CONSOLE_DIR  the served copy of console/dist        SCENARIO   retrigger | stale-asset
//   OP_ID        (retrigger) the operation stuck at CREATE_PIPELINE_PENDING
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

const { CONSOLE_URL, OPS_TOKEN, CONSOLE_DIR, SCENARIO, OP_ID } = process.env;
const TIMEOUT = 30000;

function fail(msg) {
  throw new Error(msg);
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
  // Overview: the stuck operation is listed among the stuck-looking ones.
  const stuckLink = page.locator(`#stuck a[data-op="${OP_ID}"]`);
  await stuckLink.waitFor();
  const row = await stuckLink.locator('xpath=ancestor::tr').innerText();
  if (!row.includes('CREATE_PIPELINE_PENDING')) fail('stuck row does not show the step: ' + row);
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
    return rows.some((c) => c[1] === 'CREATE_PIPELINE_PENDING' && c[2] === 'CREATE_MR_OPENED' && c[5] === 'operator:alice');
  });
  // And the audit page lists the action under the server-resolved operator.
  await page.click('nav a[href="/console/audit"]');
  await page.waitForFunction((id) => [...document.querySelectorAll('#audit-table tbody tr')]
    .some((r) => r.textContent.includes(id) && r.textContent.includes('retrigger') && r.children[1].textContent === 'alice'), OP_ID);
  console.log('PASS retrigger: overview -> stuck operation -> timeline -> re-trigger -> CREATE_MR_OPENED, audited');
}

async function staleAsset(page) {
  let loads = 0;
  page.on('load', () => loads++);
  await signIn(page);
  await page.locator('#phase-counts').waitFor();
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

const scenarios = { retrigger, 'stale-asset': staleAsset };
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
