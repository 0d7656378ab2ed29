import { call } from '../api';
import { h } from '../dom';
import type { PageContext, PageResult } from '../main';

const EXAMPLE = JSON.stringify({
  subject: 'payments-team', target: 'payments', repository: 'config/changes', targetBranch: 'main',
  title: 'Raise timeout', files: [{ path: 'payments.yaml', action: 'upsert', content: 'timeout: 30\n' }],
}, null, 2);

/**
 * Preview a change before anyone submits it: the same body as POST /api/v1/changes, answered with the
 * validation result and a unified diff per file against the target branch. Nothing is written.
 */
export async function renderPreview(ctx: PageContext): Promise<PageResult> {
  if (ctx.root.querySelector('#preview-form')) return { status: 200 };  // built once; no polling state
  const body = h('textarea', { id: 'preview-body', rows: 14, cols: 90, spellcheck: 'false' }, EXAMPLE) as HTMLTextAreaElement;
  const out = h('div', { id: 'preview-result', role: 'status' });
  const run = async () => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.value);
    } catch (e) {
      out.replaceChildren(h('p', { class: 'error' }, 'The body is not JSON: ' + (e as Error).message));
      return;
    }
    out.replaceChildren(h('p', { class: 'muted' }, 'Reading the target branch…'));
    const r = await call('POST', '/api/v1/changes/preview', parsed);
    if (r.status !== 200) {
      out.replaceChildren(h('p', { class: 'error' }, `${r.status} ${r.body.code}: ${r.body.message}`));
      return;
    }
    const d = r.body.data ?? {};
    if (!d.files) {
      out.replaceChildren(h('p', { class: 'warning', id: 'preview-reason' }, 'No diff: ' + (d.reason ?? r.body.message) +
        ' (a failed read never fails a preview; submitting still works).'));
      return;
    }
    out.replaceChildren(
      h('p', { id: 'preview-verdict', class: d.valid ? 'outcome-ok' : 'error' }, d.valid ? 'Valid: GitLab would accept this commit.' : 'Not valid: see the problems below.'),
      ...(d.files as any[]).map((f) => h('section', { class: 'preview-file' },
        h('h3', {}, `${f.path} — ${f.action}${f.exists ? '' : ' (new file)'}`),
        f.problem ? h('p', { class: 'error' }, f.problem) : null,
        f.lastCommitId ? h('p', { class: 'muted' }, 'based on commit ', h('span', { class: 'mono' }, f.lastCommitId)) : null,
        h('pre', { class: 'diff' }, f.diff || '(no change)'))));
  };
  const form = h('form', { id: 'preview-form' }, body, h('div', {}, h('button', { type: 'submit', id: 'preview-run' }, 'Preview'))) as HTMLFormElement;
  form.addEventListener('submit', (ev) => { ev.preventDefault(); void run(); });
  ctx.show(h('h2', {}, 'Preview a change'),
    h('p', { class: 'muted' }, 'The body of POST /api/v1/changes. The answer is what GitLab would do with it now: ' +
      'the validation and a diff of each file against the target branch. Nothing is written.'),
    form, out);
  return { status: 200 };
}
