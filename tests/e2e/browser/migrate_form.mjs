// Fill the Prefect UI's `migrate` run form in headless Debian Chromium, submit it, follow the run
// to Completed and open its artifacts; save a screenshot. Loopback only: every host but 127.0.0.1
// resolves to nothing (the UI fetches an analytics host even with analytics off).
// usage: node migrate_form.mjs UI_URL DEPLOYMENT_ID RUN_NAME SCREENSHOT.png
import { launch } from './launch.mjs';

const [ui, deploymentId, runName, screenshot] = process.argv.slice(2);
const t0 = Date.now();
const mark = (what) => console.error(`${((Date.now() - t0) / 1000).toFixed(1)} s: ${what}`);
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1600 } });
  page.setDefaultTimeout(60_000);
  // The UI's own API calls that did not succeed, to say why should the form create no run.
  const refused = [];
  page.on('response', (r) => { if (r.url().includes('/api/') && r.status() >= 400) refused.push(`${r.request().method()} ${new URL(r.url()).pathname} ${r.status()}`); });
  page.on('requestfailed', (r) => { if (r.url().includes('/api/')) refused.push(`${r.method()} ${new URL(r.url()).pathname} failed: ${r.failure()?.errorText}`); });
  await page.goto(`${ui}/deployments/deployment/${deploymentId}/run`, { waitUntil: 'networkidle' });

  // The `params` model renders as a nested form: the first switch is "Dry Run". The run name is
  // filled once the whole form is there: the form sets its defaults (a generated run name among
  // them) as it renders, and on a busy machine a name typed before that was overwritten, the
  // run created under the generated name.
  await page.getByText('Dry Run (Optional)').waitFor();
  mark('form loaded');
  const name = page.locator('input[type=text]').first();
  await name.fill(runName);
  const dryRun = page.locator('input[type=checkbox]').nth(0);
  await page.locator('label:has(input[type=checkbox])').nth(0).click();
  if (!(await dryRun.isChecked())) throw new Error('could not switch Dry Run on');
  const typed = await name.inputValue();
  if (typed !== runName) throw new Error(`the run name field reads "${typed}", not "${runName}", before submitting`);
  await page.getByRole('button', { name: 'Submit' }).click();

  mark('submitted');
  // The UI goes back to the deployment page; find the run the form created by its name (the
  // page's run list refreshes on its own schedule) and open it.
  let runId = null;
  for (const until = Date.now() + 90_000; !runId && Date.now() < until; await page.waitForTimeout(1000)) {
    const found = await page.request.post(`${ui}/api/flow_runs/filter`,
      { data: { flow_runs: { name: { any_: [runName] } } } });
    const runs = found.ok() ? await found.json() : [];
    if (runs.length) runId = runs[0].id;
  }
  if (!runId) {
    // What the form did create, if anything: the deployment's runs, newest first.
    const recent = await page.request.post(`${ui}/api/flow_runs/filter`, { data: {
      deployments: { id: { any_: [deploymentId] } }, sort: 'EXPECTED_START_TIME_DESC', limit: 5 } });
    const names = recent.ok() ? (await recent.json()).map((r) => r.name) : [];
    await page.screenshot({ path: screenshot.replace(/\.png$/, '-no-run.png'), fullPage: true }).catch(() => {});
    const shown = (await page.locator('[role=alert], [role=status], .p-toast').allInnerTexts().catch(() => [])).join(' | ');
    throw new Error(`no flow run named ${runName} was created by the form; the deployment's newest runs: ${names.join(', ')}; `
      + `the page: ${page.url()}; it shows: ${shown || 'no alert'}; the UI's API calls that failed: ${refused.join(', ') || 'none'}`);
  }
  mark('run found');
  await page.goto(`${ui}/runs/flow-run/${runId}`, { waitUntil: 'networkidle' });
  mark('run page loaded');
  const deadline = Date.now() + 240_000;
  for (;;) {
    if (await page.getByText('Completed', { exact: true }).first().isVisible().catch(() => false)) break;
    if (await page.getByText(/^(Failed|Crashed)$/).first().isVisible().catch(() => false)) throw new Error('run failed');
    if (Date.now() > deadline) throw new Error('run did not complete in time');
    await page.waitForTimeout(2000);
    await page.reload({ waitUntil: 'networkidle' });
  }
  mark('completed');
  // The Artifacts tab, by its role where the UI gives it one, else by its text: whichever is there
  // first (trying the role alone waited out the 60 s timeout on a UI without it, every run).
  await page.getByRole('tab', { name: /Artifacts/ }).or(page.getByText('Artifacts', { exact: true })).first().click();
  await page.getByText('plan-sandbox-2p2d').first().waitFor();
  await page.waitForTimeout(500);
  await page.screenshot({ path: screenshot, fullPage: true });
  mark('screenshot');
  console.log(JSON.stringify({ flow_run_id: runId }));
} finally {
  await browser.close();
}
