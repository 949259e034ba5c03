/* app.js - the oomless page: settings in, the library's estimate and plan out (web/README.md).
 * Every number comes from the WebAssembly build of liboomless (oomless.js / oomless.wasm) through
 * the API in web/api/oomless_web.c, which returns what `oomless estimate --json` and
 * `oomless plan --json` print. This file only reads the form, draws, and keeps the URL. */
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);

  // The form's fields, and the library's option each one sets where its name differs.
  const FIELDS = ['model', 'method', 'precision', 'batch', 'seq', 'checkpointing', 'attention', 'loss',
    'optimizer', 'stack', 'gpu', 'vram', 'margin', 'effective', 'gpus', 'sharding', 'offload'];
  const OPTION_OF = { margin: 'vram-safety-margin', effective: 'target-effective-batch' };
  // The page's first view: `make demo`'s workload (Llama-3.1-8B LoRA, seq 2048, on an RTX 4090);
  // the other fields start at the library's defaults (LIB_DEFAULTS).
  const FIRST_VIEW = {
    model: 'llama-3.1-8b', method: 'lora', seq: '2048', gpu: 'rtx-4090', vram: '24', effective: '32',
  };
  // The selects, whose values come from the library's option tables (oomw_options).
  const CHOICES = ['method', 'precision', 'optimizer', 'checkpointing', 'attention', 'loss', 'stack', 'sharding', 'offload'];
  // The library's defaults (its option tables, filled by fillSelects): an option equal to its
  // default is not passed, so the commands shown are the shortest that give the same document.
  const LIB_DEFAULTS = {};
  // every option's default by its name (the plan's knobs are shown when they differ from it)
  const OPTION_DEFAULTS = {};
  // the values `plan` takes of each select (the tables' commands: fsdp2 is estimated, not planned)
  const PLAN_VALUES = {};
  let DEFAULTS = {};
  // `oomless table`'s default GPUs; the chosen one is added in front
  const TABLE_GPUS = ['rtx-3090', 'rtx-4090', 'a100-40gb', 'a100-80gb', 'h100-sxm'];
  const URL_CONFIG_MAX = 6000; // characters of a config kept in a shared link
  // What the library's entry points take (oomw_limits: an option's value, a config.json and its
  // name), read once the module is there. Nothing longer is handed over: a crafted link or a
  // pasted value gets a message, never a trapped module.
  let LIMITS = { value_max: 1024, options_max: 16384, name_max: 100, file_max: 1 << 20 };

  const COMPONENTS = [
    ['weights', 'weights'], ['gradients', 'gradients'], ['optimizer', 'optimizer states'],
    ['activations', 'activations'], ['logits', 'logits / loss'], ['kv_cache', 'KV cache'],
    ['temporaries', 'temporaries'], ['cache', 'allocator cache'], ['overhead', 'CUDA context / overhead'],
  ];

  let M = null; // the WebAssembly module
  let config = null; // a config.json read from the user's disk: {name, bytes}
  let gpus = []; // the catalog
  let pending = false;

  // ---- calling the library ---------------------------------------------------------------------

  function call(fn, options) {
    const rc = M.ccall(fn, 'number', ['string'], [JSON.stringify(options)]);
    return { rc, out: M.UTF8ToString(M._oomw_output()), err: M.UTF8ToString(M._oomw_error()) };
  }

  function call0(fn) {
    const rc = M.ccall(fn, 'number', [], []);
    return { rc, out: M.UTF8ToString(M._oomw_output()), err: M.UTF8ToString(M._oomw_error()) };
  }

  function size(bytes) {
    return M.UTF8ToString(M.ccall('oomw_format_size', 'number', ['number'], [bytes]));
  }

  // ---- settings ----------------------------------------------------------------------------------

  function values() {
    const v = {};
    for (const f of FIELDS) v[f] = $(f).value.trim();
    return v;
  }

  function setValues(v) {
    for (const f of FIELDS) {
      if (v[f] === undefined) continue;
      const el = $(f);
      if (el.tagName === 'SELECT' && ![...el.options].some((o) => o.value === v[f])) continue;
      el.value = v[f];
    }
    $('vram-field').hidden = $('gpu').value !== 'custom';
  }

  function modelName(v) {
    return config ? config.name : v.model;
  }

  // The options of both calls, in the order the commands show them.
  function options(v) {
    const est = {}, plan = {};
    const put = (o, key, value, dflt) => { if (value !== dflt) o[key] = value; };
    est.model = plan.model = modelName(v);
    for (const k of ['method', 'precision', 'optimizer', 'batch', 'seq', 'checkpointing', 'attention', 'loss',
      'stack']) {
      put(est, k, v[k], LIB_DEFAULTS[k]);
      // the planner chooses the micro-batch and the checkpointing itself
      if (k !== 'batch' && k !== 'checkpointing') put(plan, k, v[k], LIB_DEFAULTS[k]);
    }
    for (const o of [est, plan]) {
      if (v.gpu === 'custom') o.vram = v.vram;
      else o.gpu = v.gpu;
      put(o, 'vram-safety-margin', v.margin, LIB_DEFAULTS.margin);
      // data-parallel GPUs and what is sharded or offloaded over them (the planner starts from
      // these and may shard more; an offload asked for is one it may use)
      for (const k of ['gpus', 'sharding', 'offload']) {
        if (o === plan && PLAN_VALUES[k] && !PLAN_VALUES[k].has(v[k])) continue;
        put(o, k, v[k], LIB_DEFAULTS[k]);
      }
    }
    if (v.offload !== LIB_DEFAULTS.offload) plan.allow = OPTION_DEFAULTS.allow + ',offload';
    plan['target-effective-batch'] = v.effective;
    // one plan per GPU: the planner's options without the GPU, and the list (table's --gpus is
    // that list: the GPUs of each row are its --gpus-per-node)
    const table = {};
    for (const [k, val] of Object.entries(plan)) {
      if (k === 'gpus') table['gpus-per-node'] = val;
      else if (k !== 'gpu' && k !== 'vram') table[k] = val;
    }
    const list = TABLE_GPUS.slice();
    if (v.gpu !== 'custom' && !list.includes(v.gpu)) list.unshift(v.gpu);
    table.gpus = list.join(',');
    return { est, plan, table };
  }

  function shellWord(s) {
    return /^[A-Za-z0-9._%:,/+=@-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
  }

  function command(name, opts) {
    return 'oomless ' + name + ' ' + Object.entries(opts).map(([k, v]) => '--' + k + ' ' + shellWord(v)).join(' ');
  }

  // ---- the URL: every setting, and a dropped config.json in the fragment (never sent anywhere) ----

  function b64encode(bytes) {
    let s = '';
    for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }

  function b64decode(text) {
    const s = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  function stateToHash(v) {
    const p = new URLSearchParams();
    for (const f of FIELDS) {
      if (f === 'vram' && v.gpu !== 'custom') continue;
      p.set(f, v[f]);
    }
    if (config) {
      const enc = b64encode(config.bytes);
      const fits = enc.length <= URL_CONFIG_MAX;
      if (fits) {
        p.set('config', config.name);
        p.set('config-data', enc);
      }
      $('config-name').textContent = 'Using ' + config.name + ' (' + config.bytes.length + ' bytes' +
        (fits ? ')' : '; too large to travel in a link: share the file with it)');
    }
    return '#' + p.toString();
  }

  // The most characters of base64 a config of file_max bytes takes.
  function b64Max() {
    return 4 * Math.ceil(LIMITS.file_max / 3);
  }

  function tooLong(what, length, max) {
    return what + ' is ' + length.toLocaleString('en') + ' characters long (at most ' +
      max.toLocaleString('en') + ')';
  }

  // The settings in the link; a field longer than the library takes is left out and said.
  function hashToState() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ''));
    const v = {}, dropped = [];
    for (const f of FIELDS) {
      if (!p.has(f)) continue;
      const value = p.get(f);
      if (value.length > LIMITS.value_max) dropped.push(tooLong('"' + f + '"', value.length, LIMITS.value_max));
      else v[f] = value;
    }
    let cfg = null;
    if (p.has('config') && p.has('config-data')) {
      const data = p.get('config-data');
      if (data.length > b64Max()) {
        dropped.push(tooLong('the config.json', data.length, b64Max()) + ': a model config.json is a few KB');
      } else {
        try {
          cfg = { name: safeName(p.get('config')), bytes: b64decode(data) };
        } catch (e) {
          cfg = null;
          showConfigError('The link\'s config.json could not be decoded: ' + e.message);
        }
      }
    }
    showLinkError(dropped.length ? 'This link was cut short: ' + dropped.join('; ') +
      '. Those settings are left at their defaults.' : '');
    return { v, cfg };
  }

  function showLinkError(text) {
    $('link-error').textContent = text;
    $('link-error').hidden = !text;
  }

  // ---- a config.json from the user's disk ---------------------------------------------------------

  function safeName(name) {
    const base = String(name).slice(-LIMITS.name_max).split(/[\\/]/).pop().replace(/[^A-Za-z0-9._-]/g, '_');
    return /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$/.test(base) ? base : 'config.json';
  }

  function showConfigError(text) {
    $('config-error').textContent = text;
    $('config-error').hidden = !text;
  }

  // Writes the file into the module's in-memory file system (it stays in this page) and uses it.
  function useConfig(cfg) {
    const rc = M.ccall('oomw_write_file', 'number', ['string', 'array', 'number'], [cfg.name, cfg.bytes, cfg.bytes.length]);
    if (rc !== 0) {
      showConfigError(M.UTF8ToString(M._oomw_error()));
      return;
    }
    config = cfg;
    $('config-name').textContent = 'Using ' + cfg.name + ' (' + cfg.bytes.length + ' bytes)';
    $('config-loaded').hidden = false;
    $('model').disabled = true;
    showConfigError('');
    update();
  }

  function readFile(file) {
    if (!file) return;
    if (file.size > LIMITS.file_max) {
      showConfigError(safeName(file.name) + ' is ' + file.size + ' bytes: a model config.json is a few KB (limit ' +
        size(LIMITS.file_max) + ').');
      return;
    }
    const reader = new FileReader();
    reader.onload = () => useConfig({ name: safeName(file.name), bytes: new Uint8Array(reader.result) });
    reader.onerror = () => showConfigError('Cannot read ' + file.name + ': ' + reader.error);
    reader.readAsArrayBuffer(file);
  }

  // ---- a config.json from the Hugging Face Hub --------------------------------------------------
  // The page fetches it itself: the Hub lets any page read its files (CORS). The endpoint is
  // https://huggingface.co, or the page's ?hub=URL (a mirror; the browser test's local server).

  const HUB_TIMEOUT_MS = 20000;

  function hubEndpoint() {
    const q = new URLSearchParams(location.search).get('hub');
    return q && /^https?:\/\/[^\s]+$/.test(q) ? q.replace(/\/+$/, '') : 'https://huggingface.co';
  }

  function hubStatus(text) {
    $('hub-status').textContent = text;
  }

  function fetchHub() {
    const id = $('hub-id').value.trim();
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/.test(id)) {
      showConfigError((id ? '"' + id.slice(0, 200) + '" is not' : 'Give') + ' a Hub model id: ORGANISATION/NAME, as Qwen/Qwen3-8B.');
      return;
    }
    const url = hubEndpoint() + '/' + id + '/resolve/main/config.json';
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), HUB_TIMEOUT_MS);
    $('hub-fetch').disabled = true;
    showConfigError('');
    hubStatus('Fetching ' + url + ' …');
    fetch(url, { signal: abort.signal, credentials: 'omit', cache: 'no-cache' }).then((r) => {
      if (r.status === 401 || r.status === 403) {
        throw new Error(id + ' is gated or private on the Hub (HTTP ' + r.status + '): this page fetches public models only. ' +
          'Accept its licence on ' + hubEndpoint() + '/' + id + ', download its config.json and drop it here.');
      }
      if (r.status === 404) throw new Error(id + ' is not on the Hub, or has no config.json (HTTP 404): check its spelling.');
      if (!r.ok) throw new Error('The Hub answered HTTP ' + r.status + ' for ' + url + '.');
      const length = Number(r.headers.get('Content-Length') || 0);
      if (length > LIMITS.file_max) throw new Error(url + ' is ' + length + ' bytes: a model config.json is a few KB (limit ' + size(LIMITS.file_max) + ').');
      return r.arrayBuffer();
    }).then((buf) => {
      if (buf.byteLength > LIMITS.file_max) {
        throw new Error(url + ' is ' + buf.byteLength + ' bytes: a model config.json is a few KB (limit ' + size(LIMITS.file_max) + ').');
      }
      hubStatus('Fetched ' + id + ' (' + buf.byteLength + ' bytes) from ' + hubEndpoint() + '.');
      useConfig({ name: safeName(id.replace('/', '--') + '.json'), bytes: new Uint8Array(buf), hub: id });
    }).catch((e) => {
      hubStatus('');
      if (e.name === 'AbortError') showConfigError('The Hub did not answer within ' + HUB_TIMEOUT_MS / 1000 + ' s (' + url + ').');
      else if (e instanceof TypeError) showConfigError('The Hub could not be reached (' + url + '): offline, or the network blocks it (' + e.message + ').');
      else showConfigError(e.message);
    }).finally(() => {
      clearTimeout(timer);
      $('hub-fetch').disabled = false;
    });
  }

  function clearConfig() {
    config = null;
    $('config-loaded').hidden = true;
    $('model').disabled = false;
    $('config-file').value = '';
    showConfigError('');
    update();
    $('model').focus();
  }

  // ---- drawing -------------------------------------------------------------------------------------

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(1) + '%' : '0.0%';
  }

  function showError(text) {
    $('error').textContent = text;
    $('error').hidden = !text;
  }

  function renderEstimate(r, opts) {
    const verdict = $('verdict'), bar = $('bar'), scale = $('bar-scale'), body = $('breakdown').tBodies[0];
    $('estimate-json').textContent = r.out;
    verdict.textContent = '';
    verdict.className = 'verdict';
    bar.replaceChildren();
    scale.replaceChildren();
    body.replaceChildren();
    if (r.rc !== 0 && r.rc !== 1) {
      showError(r.err);
      if (config && /model config|config\.json|'.*\.json'/.test(r.err)) showConfigError(r.err);
      bar.hidden = true;
      $('breakdown').hidden = true;
      return null;
    }
    showError('');
    if (config) showConfigError('');
    bar.hidden = false;
    $('breakdown').hidden = false;
    const doc = JSON.parse(r.out), m = doc.memory, b = doc.budget;
    const parts = {
      weights: m.weights, gradients: m.gradients, optimizer: m.optimizer, activations: m.activations,
      logits: m.logits, kv_cache: m.kv_cache, temporaries: m.temporaries,
      cache: m.reserved_peak - m.allocated_peak, overhead: m.overhead,
    };
    const peak = m.device_peak;
    if (b) {
      const fits = b.fits;
      verdict.classList.add(fits ? 'fits' : 'nofit');
      verdict.dataset.fits = String(fits);
      verdict.replaceChildren(
        el('strong', {}, fits ? 'Fits' : 'Does not fit'),
        document.createTextNode(': device peak ' + size(peak) + ' of ' + size(b.usable_bytes) + ' usable (' +
          size(Math.abs(b.headroom_bytes)) + (fits ? ' to spare' : ' over') + '); peak at the ' + doc.peak_phase +
          ', ' + size(m.allocated_peak) + ' allocated, ' + size(m.reserved_peak) + ' reserved by PyTorch.'));
    } else {
      verdict.dataset.fits = '';
      verdict.textContent = 'Device peak ' + size(peak) + ' (no GPU chosen).';
    }
    // the stack and the versions the figures model (the document's "stack")
    if (doc.stack) {
      verdict.append(document.createTextNode(' Modelled for ' + doc.stack.name + ' (' + doc.stack.version + ', ' +
        (doc.stack.traced ? 'traced on the meta device' : 'from its source, not traced') + ').'));
    }
    // a bitsandbytes 4-bit base: the code that quantized it and the release modelled
    if (doc.qlora && doc.qlora.bitsandbytes) {
      verdict.append(document.createTextNode(' 4-bit base: quantizer ' + doc.qlora.quantizer + ', bitsandbytes ' +
        doc.qlora.bitsandbytes + (doc.qlora.bitsandbytes === '0.43' ? ' or earlier.' : ' or later.')));
    }
    const top = Math.max(peak, b ? b.target_bytes : 0) || 1;
    const labels = [];
    COMPONENTS.forEach(([key, label], i) => {
      const bytes = parts[key];
      const row = el('tr', { 'data-key': key, 'data-bytes': String(bytes) });
      row.append(el('th', { scope: 'row' }, ''), el('td', { class: 'num' }, size(bytes)), el('td', { class: 'num' }, pct(bytes, peak)));
      row.cells[0].append(el('span', { class: 'swatch c' + i, 'aria-hidden': 'true' }), document.createTextNode(label));
      body.append(row);
      if (bytes > 0) {
        const seg = el('span', { class: 'seg c' + i, title: label + ': ' + size(bytes) });
        seg.style.width = (100 * bytes / top) + '%';
        bar.append(seg);
        labels.push(label + ' ' + size(bytes));
      }
    });
    const total = el('tr', { 'data-key': 'device_peak', 'data-bytes': String(peak), class: 'total' });
    total.append(el('th', { scope: 'row' }, 'total (device peak)'), el('td', { class: 'num' }, size(peak)), el('td', { class: 'num' }, '100.0%'));
    body.append(total);
    if (b) {
      const usable = el('span', { class: 'line usable' });
      usable.style.left = (100 * b.usable_bytes / top) + '%';
      const target = el('span', { class: 'line target' });
      target.style.left = (100 * b.target_bytes / top) + '%';
      bar.append(usable, target);
      const u = el('span', { class: 'tick usable' }, 'usable ' + size(b.usable_bytes));
      u.style.left = (100 * b.usable_bytes / top) + '%';
      const t = el('span', { class: 'tick target' }, 'GPU ' + size(b.target_bytes));
      t.style.left = (100 * b.target_bytes / top) + '%';
      scale.append(u, t);
    }
    bar.setAttribute('aria-label', 'Device peak ' + size(peak) + (b ? ' against ' + size(b.usable_bytes) + ' usable' : '') + ': ' + labels.join(', '));
    return doc;
  }

  function knobText(p) {
    return 'batch ' + p.batch_size + ' × ' + p.grad_accum + ' accumulation (effective ' + p.effective_batch + '), seq ' +
      p.seq_len + ', checkpointing ' + p.checkpointing + ', ' + p.precision + ', ' + p.optimizer +
      (p.sharding !== OPTION_DEFAULTS.sharding ? ', ' + p.sharding : '') +
      (p.offload !== OPTION_DEFAULTS.offload ? ', offload ' + p.offload : '');
  }

  function speed(t) {
    if (!t) return '';
    return ' · about ' + Math.round(t.tokens_per_s).toLocaleString('en') + ' tokens/s';
  }

  function renderPlan(r) {
    const box = $('plan');
    box.replaceChildren();
    $('plan-json').textContent = r.out;
    if (r.rc !== 0 && r.rc !== 1) {
      box.append(el('p', { class: 'error' }, r.err));
      return null;
    }
    const doc = JSON.parse(r.out);
    if (doc.found) {
      const best = el('p', { class: 'best', id: 'plan-best' });
      best.append(el('strong', {}, knobText(doc.plan)));
      best.append(el('br'), document.createTextNode('device peak ' + size(doc.memory.device_peak) + ' (' +
        Math.round(100 * doc.budget.utilisation) + '% of ' + size(doc.budget.usable_bytes) + ' usable on ' +
        doc.budget.gpu_name + ')' + speed(doc.throughput)));
      box.append(best);
      if (doc.budget.fallback) box.append(el('p', { class: 'note' }, 'Custom memory size: speed as on the default profile, ' + doc.budget.gpu_name + '.'));
      for (const n of doc.notices || []) box.append(el('p', { class: 'note' }, n));
      if (doc.alternatives.length) {
        // those that fit first (the document lists them first), then the faster ones that do
        // not, under a heading of their own
        for (const fits of [true, false]) {
          const group = doc.alternatives.filter((a) => a.fits === fits);
          if (!group.length) continue;
          box.append(el('h3', {}, fits ? 'Next best' : 'Faster, but they do not fit'));
          const ol = el('ol', { class: 'alternatives' + (fits ? '' : ' nofit') });
          for (const a of group) {
            const li = el('li', { 'data-fits': String(a.fits) });
            li.append(document.createTextNode(knobText(a.plan) + ' — peak ' + size(a.device_peak) + speed(a.throughput)),
              el('br'), el('span', { class: a.fits ? 'why' : 'why nofit' }, a.why));
            ol.append(li);
          }
          box.append(ol);
        }
      }
    } else {
      box.append(el('p', { class: 'nofit-text', id: 'plan-best' }, r.err || 'Nothing fits.'));
      if (doc.suggestions && doc.suggestions.length) {
        box.append(el('h3', {}, 'What would make it fit'));
        const ul = el('ul');
        for (const s of doc.suggestions) ul.append(el('li', {}, s));
        box.append(ul);
      }
    }
    return doc;
  }

  function renderTable(r) {
    const body = $('others').tBodies[0];
    body.replaceChildren();
    $('table-json').textContent = r.out;
    if (r.rc !== 0) {
      const row = el('tr');
      row.append(el('td', { colspan: '5', class: 'error' }, r.err));
      body.append(row);
      return;
    }
    for (const t of JSON.parse(r.out).tables) {
      for (const row of t.rows) {
        const tr = el('tr', { 'data-gpu': row.budget.gpu, 'data-found': String(row.found) });
        tr.append(el('th', { scope: 'row' }, row.budget.gpu_name), el('td', { class: 'num' }, size(row.budget.usable_bytes)));
        if (row.found) {
          const p = row.plan;
          // the knob named beside its value, as the text report's alternatives write it ('ckpt
          // full'): a bare 'full' reads as a full fine-tune
          tr.append(el('td', {}, p.batch_size + ' × ' + p.grad_accum + ', ckpt ' + p.checkpointing + ', ' + p.precision +
              (p.optimizer !== OPTION_DEFAULTS.optimizer ? ', ' + p.optimizer : '') +
              (p.offload !== OPTION_DEFAULTS.offload ? ', offload' : '')),
            el('td', { class: 'num' }, size(row.memory.device_peak)),
            el('td', { class: 'num' }, row.throughput ? Math.round(row.throughput.tokens_per_s).toLocaleString('en') : '-'));
        } else {
          tr.append(el('td', { colspan: '3', class: 'why nofit' }, 'nothing fits' +
            (row.smallest ? ' (smallest tried: ' + size(row.smallest.device_peak) + ')' : '')));
        }
        body.append(tr);
      }
    }
  }

  function renderCurve(curveText, planDoc) {
    const host = $('curve');
    host.replaceChildren();
    if (!curveText || !planDoc || !planDoc.found) {
      $('curve-figure').hidden = true;
      return;
    }
    $('curve-figure').hidden = false;
    const c = JSON.parse(curveText);
    // drawn at the width it is shown, so that its text stays readable on a phone
    const W = Math.round(Math.min(720, Math.max(300, host.clientWidth || 640))), H = W < 500 ? 240 : 300;
    const L = 58, R = 12, T = 16, B = 40;
    const peaks = c.peak_none.concat(c.peak_full).filter((x) => x !== null);
    const GiB = 1073741824;
    let ymax = Math.max(c.usable_bytes * 1.15, Math.min(Math.max(...peaks), c.usable_bytes * 2.5));
    const step = [1, 2, 4, 5, 10, 20, 40, 50, 100, 200, 500].find((s) => ymax / GiB / s <= 6) || 1000;
    ymax = Math.ceil(ymax / GiB / step) * step * GiB;
    const n = c.batch.length;
    const x = (i) => L + 14 + (n > 1 ? i * (W - L - R - 28) / (n - 1) : (W - L - R - 28) / 2);
    const y = (v) => T + (H - T - B) * (1 - v / ymax);
    const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': 'curve-title curve-desc' });
    svg.append(svgEl('desc', { id: 'curve-desc' }, 'Device peak by micro-batch: ' + c.batch.map((bt, i) =>
      bt + ': ' + (c.peak_none[i] === null ? '-' : size(c.peak_none[i])) + ' / ' + (c.peak_full[i] === null ? '-' : size(c.peak_full[i])) + ' with checkpointing').join('; ') +
      '. Usable ' + size(c.usable_bytes) + '.'));
    for (let g = 0; g <= ymax / GiB + 1e-9; g += step) {
      svg.append(svgEl('line', { x1: L, x2: W - R, y1: y(g * GiB), y2: y(g * GiB), class: 'grid' }));
      svg.append(svgEl('text', { x: L - 6, y: y(g * GiB) + 4, class: 'axis', 'text-anchor': 'end' }, g + ' GiB'));
    }
    c.batch.forEach((bt, i) => svg.append(svgEl('text', { x: x(i), y: H - B + 18, class: 'axis', 'text-anchor': 'middle' }, String(bt))));
    svg.append(svgEl('text', { x: (L + W - R) / 2, y: H - 4, class: 'axis', 'text-anchor': 'middle' }, 'micro-batch'));
    // peaks far above the budget leave the plot (clipped) rather than squash it
    const clip = svgEl('clipPath', { id: 'plot-area' });
    clip.append(svgEl('rect', { x: L - 8, y: T - 8, width: W - L - R + 16, height: H - T - B + 8 }));
    svg.append(clip);
    const line = (vals, cls) => {
      let d = '';
      vals.forEach((v, i) => { if (v !== null) d += (d ? 'L' : 'M') + x(i).toFixed(1) + ',' + y(v).toFixed(1); });
      svg.append(svgEl('path', { d, class: 'curve ' + cls, 'clip-path': 'url(#plot-area)' }));
      vals.forEach((v, i) => { if (v !== null && v <= ymax) svg.append(svgEl('circle', { cx: x(i), cy: y(v), r: 3, class: 'pt ' + cls })); });
    };
    line(c.peak_none, 'none');
    line(c.peak_full, 'full');
    svg.append(svgEl('line', { x1: L, x2: W - R, y1: y(c.usable_bytes), y2: y(c.usable_bytes), class: 'budget' }));
    svg.append(svgEl('text', { x: W - R, y: y(c.usable_bytes) - 6, class: 'budget-label', 'text-anchor': 'end' }, 'usable ' + size(c.usable_bytes)));
    const chosen = c.batch.indexOf(planDoc.plan.batch_size);
    if (chosen >= 0) {
      const v = (planDoc.plan.checkpointing === 'full' ? c.peak_full : c.peak_none)[chosen];
      if (v !== null) svg.append(svgEl('circle', { cx: x(chosen), cy: y(v), r: 7, class: 'chosen' }));
    }
    host.append(svg);
    const legend = el('p', { class: 'legend' });
    legend.append(el('span', { class: 'key none' }, 'no checkpointing'), el('span', { class: 'key full' }, 'full checkpointing'),
      el('span', { class: 'key chosen' }, 'the plan'));
    host.append(legend);
  }

  // ---- the update loop -----------------------------------------------------------------------------

  function update() {
    if (!M) return;
    const v = values();
    $('vram-field').hidden = v.gpu !== 'custom';
    const long = FIELDS.find((f) => v[f].length > LIMITS.value_max);
    if (long) { // typed or pasted: the library is not called with it
      showError('The field "' + long + '" ' + tooLong('', v[long].length, LIMITS.value_max).trim() + '.');
      return;
    }
    const o = options(v);
    const est = call('oomw_estimate', o.est);
    renderEstimate(est, o.est);
    const plan = call('oomw_plan', o.plan);
    const planDoc = renderPlan(plan);
    renderCurve(M.UTF8ToString(M._oomw_curve()), planDoc);
    renderTable(call('oomw_table', o.table));
    $('commands').textContent = command('estimate', o.est) + '\n' + command('plan', o.plan) + '\n' +
      command('table', o.table) + ' --format json' +
      (config && config.hub ? '\n# --model ' + config.name + ': the config.json of ' + config.hub +
        ' (oomless --model ' + config.hub + ' fetches the same)'
        : config ? '\n# --model ' + config.name + ': the path of your config.json' : '');
    history.replaceState(null, '', stateToHash(v));
    // for the load-time benchmark (bench/web_load.py): milliseconds from navigation to first result
    if (!document.body.dataset.readyMs) document.body.dataset.readyMs = String(Math.round(performance.now()));
    document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
  }

  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; update(); });
  }

  function fillSelects() {
    const names = {};
    for (const f of FIELDS) names[OPTION_OF[f] || f] = f;
    for (const o of JSON.parse(call0('oomw_options').out)) {
      OPTION_DEFAULTS[o.name] = o.default;
      const field = names[o.name];
      if (!field) continue;
      if (o.default !== null) LIB_DEFAULTS[field] = o.default;
      if (!CHOICES.includes(field)) continue;
      PLAN_VALUES[field] = new Set(o.values.filter((v) => v.commands.includes('plan')).map((v) => v.name));
      const sel = $(field);
      // the values estimate takes, but forms (every:N): a select offers words
      for (const v of o.values) {
        if (v.form || !v.commands.includes('estimate')) continue;
        sel.append(el('option', { value: v.name, title: v.help }, v.name));
      }
      sel.title = o.help;
    }
    DEFAULTS = Object.assign({}, LIB_DEFAULTS, FIRST_VIEW);
    const presets = JSON.parse(call0('oomw_presets').out);
    const model = $('model');
    for (const p of presets) model.append(el('option', { value: p.name }, p.name + ' (' + p.family + ', ' + (p.params / 1e9).toFixed(2) + ' B)'));
    gpus = JSON.parse(call0('oomw_catalog').out).gpus;
    const gpu = $('gpu');
    for (const g of gpus) gpu.append(el('option', { value: g.id }, g.name + ' — ' + size(g.memory_bytes)));
    gpu.append(el('option', { value: 'custom' }, 'Custom memory size…'));
  }

  function showAccuracy() {
    fetch('accuracy.json').then((r) => r.ok ? r.json() : null).then((a) => {
      if (!a) return;
      $('accuracy').textContent = 'median error ' + a.median_error_pct + '% over ' + a.cases + ' published measurements';
      $('accuracy-source').textContent = 'Accuracy: median |error| ' + a.median_error_pct + '% (max ' + a.max_error_pct +
        '%) over ' + a.cases + ' public measurements (' + a.source + '), measured with `' + a.command + '` on ' + a.date + '.';
    }).catch(() => {});
  }

  function wire() {
    const form = $('settings');
    // the Hub id is no setting: typing it changes nothing until it is fetched (and would clear
    // the message a refused id just showed)
    const setting = (e) => { if (e.target.id !== 'hub-id') schedule(); };
    form.addEventListener('input', setting);
    form.addEventListener('change', setting);
    form.addEventListener('submit', (e) => e.preventDefault());
    $('config-file').addEventListener('change', (e) => readFile(e.target.files[0]));
    $('config-clear').addEventListener('click', clearConfig);
    $('hub-fetch').addEventListener('click', fetchHub);
    $('hub-id').addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); fetchHub(); } });
    // a file dropped anywhere on the page is taken as the config (rather than the browser
    // leaving the page to show it); the drop zone lights up under the pointer
    const drop = $('drop');
    for (const t of ['dragenter', 'dragover']) {
      document.addEventListener(t, (e) => { e.preventDefault(); drop.classList.toggle('over', drop.contains(e.target)); });
    }
    document.addEventListener('dragleave', (e) => { if (!e.relatedTarget) drop.classList.remove('over'); });
    document.addEventListener('drop', (e) => {
      e.preventDefault();
      drop.classList.remove('over');
      if (e.dataTransfer && e.dataTransfer.files.length) readFile(e.dataTransfer.files[0]);
    });
    $('copy-link').addEventListener('click', () => {
      const done = (t) => { $('copied').textContent = t; };
      if (navigator.clipboard) navigator.clipboard.writeText(location.href).then(() => done('Link copied.'), () => done(location.href));
      else done(location.href);
    });
    window.addEventListener('resize', () => { if (M) schedule(); });
    window.addEventListener('hashchange', () => {
      const s = hashToState();
      setValues(Object.assign({}, DEFAULTS, s.v));
      if (s.cfg) useConfig(s.cfg); else if (config) clearConfig(); else update();
    });
  }

  function start(module) {
    M = module;
    LIMITS = JSON.parse(call0('oomw_limits').out);
    for (const f of FIELDS) if ($(f).tagName === 'INPUT' && $(f).type === 'text') $(f).maxLength = LIMITS.value_max;
    $('version').textContent = 'oomless ' + M.UTF8ToString(M._oomw_version()) + ' (WebAssembly)';
    fillSelects();
    const s = hashToState();
    setValues(Object.assign({}, DEFAULTS, s.v));
    wire();
    if (s.cfg) useConfig(s.cfg); else update();
  }

  showAccuracy();
  const failed = (e) => {
    $('version').textContent = 'oomless could not start';
    showError('The WebAssembly module could not be loaded: ' + e + (location.protocol === 'file:'
      ? '. Browsers do not load it from a file: serve the folder (make web-serve, or python3 -m http.server in build/web).'
      : ''));
  };
  if (typeof createOomless !== 'function') failed('oomless.js is missing');
  else createOomless().then(start, failed);
  // for the browser test and the curious: the module's raw calls
  window.oomlessPage = { call: (fn, o) => call(fn, o), options: () => options(values()), module: () => M };
})();
