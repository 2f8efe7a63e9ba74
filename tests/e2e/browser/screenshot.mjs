// A screenshot of one Prefect UI page, for the docs: waits for the page to settle (and for TEXT,
// when given, to show). Loopback only, as migrate_form.mjs.
// usage: node screenshot.mjs URL OUT.png [TEXT]
import { launch } from './launch.mjs';

const [url, out, text] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(60_000);
  await page.goto(url, { waitUntil: 'networkidle' });
  if (text) await page.getByText(text).first().waitFor();
  await page.waitForTimeout(1500);
  await page.screenshot({ path: out, fullPage: true });
} finally {
  await browser.close();
}
