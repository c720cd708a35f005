/* html.c — `headroom plan --html`: the step's memory as one self-contained
 * page (the arena over the schedule, live bytes by category, the report's
 * table); the plan goes in as compact JSON, a small script draws it on canvases. */
#include "exec/session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A JSON string that is also safe inside <script>: no "</script>", no "<!--". */
static void js_chars(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&') fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

static void js_str(FILE *f, const char *s) {
    fputc('"', f);
    js_chars(f, s);
    fputc('"', f);
}

static void html_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* The colours the script uses too, by hr_category. */
static const char *const cat_colour[HR_CAT_COUNT] = {"#4e79a7", "#f28e2b", "#b07aa1", "#e15759",
                                                     "#76b7b2", "#edc948", "#59a14f", "#9c755f"};

static const char page_style[] =
    "<style>\n"
    "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fff}\n"
    "h1{font-size:18px;margin:0 0 4px}p{margin:2px 0}.note{color:#7a4b00}\n"
    "canvas{display:block;border:1px solid #ccc;margin:6px 0}\n"
    "#legend span{display:inline-block;margin-right:14px}\n"
    ".sw{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border:1px solid #0003}\n"
    "table{border-collapse:collapse;margin-top:8px}td,th{padding:2px 10px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}tr:nth-child(even){background:#f4f4f4}\n"
    "#tip{position:fixed;pointer-events:none;background:#fffff0;border:1px solid #888;padding:4px 6px;"
    "display:none;max-width:520px;box-shadow:2px 2px 4px #0002;white-space:pre-wrap}\n"
    "#info{white-space:pre-wrap;min-height:3em;background:#f6f6f6;padding:4px 6px}\n"
    "</style>\n";

/* The drawing: the arena (every tensor group a rectangle; the visible steps
 * only, zoomed with the wheel, reset by a double click), live bytes by
 * category stacked over the same steps, the legend's sums from the data.
 * For the tests it leaves on <body>: data-drawn (rectangles drawn at load),
 * data-legend-bytes (the legend's total), data-live-max (the highest stack),
 * data-render-ms (from navigation to drawn), data-visible (rectangles in the
 * last drawing, after a zoom). */
static const char page_script[] =
    "<script>\n"
    "(function(){\n"
    "var D=JSON.parse(document.getElementById('plan-data').textContent),T=D.t,S=Math.max(D.steps,1),NC=D.cats.length;\n"
    "var COL=D.colours,A=Math.max(D.arena,1),body=document.body;\n"
    "function fmt(n){var u=['B','KiB','MiB','GiB','TiB','PiB'],k=0;while(n>=1024&&k<5){n/=1024;k++;}"
    "return k?n.toFixed(2)+' '+u[k]:n+' B';}\n"
    "function node(s){var n=D.nodes[s];if(!n)return '?';var l=n[1]>=0?D.layers[n[1]]:null;"
    "return D.ops[n[0]]+(l?' (layer '+l[0]+', '+l[1]+')':'')+(n[2]?' [recomputed]':'');}\n"
    "function layer(i){return i>=0?D.layers[i][0]+' ('+D.layers[i][1]+')':'-';}\n"
    "var RC=T.map(function(t){return /\\.recomputed(,|$)/.test(t[6]);});\n"
    "var sum=[],total=0;for(var k=0;k<NC;k++)sum.push(0);\n"
    "for(var i=0;i<T.length;i++)sum[T[i][4]]+=T[i][3];\n"
    "var lg=document.getElementById('legend');\n"
    "for(k=0;k<NC;k++){total+=sum[k];if(!sum[k]&&!D.cat_bytes[k])continue;var e=document.createElement('span');"
    "e.dataset.cat=k;e.dataset.bytes=sum[k];e.innerHTML='<i class=sw style=\"background:'+COL[k]+'\"></i>'+"
    "D.cats[k]+' '+fmt(sum[k]);lg.appendChild(e);}\n"
    "body.dataset.legendBytes=total;\n"
    /* live bytes per category and step: differences, then running sums */
    "var live=[],top=0;for(k=0;k<NC;k++)live.push(new Float64Array(S+1));\n"
    "for(i=0;i<T.length;i++){var t=T[i];if(t[0]>t[1])continue;live[t[4]][t[0]]+=t[3];live[t[4]][t[1]+1]-=t[3];}\n"
    "for(k=0;k<NC;k++)for(var s=1;s<=S;s++)live[k][s]+=live[k][s-1];\n"
    "for(s=0;s<S;s++){var h=0;for(k=0;k<NC;k++)h+=live[k][s];if(h>top)top=h;}\n"
    "body.dataset.liveMax=top;\n"
    "var W=Math.max(600,Math.min(1600,window.innerWidth-40)),L=86,R=12,TP=12,B=26;\n"
    "function setup(id,h){var c=document.getElementById(id),r=window.devicePixelRatio||1;c.width=W*r;c.height=h*r;"
    "c.style.width=W+'px';c.style.height=h+'px';var x=c.getContext('2d');x.scale(r,r);return {c:c,x:x,h:h};}\n"
    "var AR=setup('arena',460),LV=setup('live',220),v0=0,v1=S,rect=new Float32Array(4*T.length),vis=[];\n"
    "function X(s){return L+(s-v0)*(W-L-R)/(v1-v0);}\n"
    "function axes(g,max){var x=g.x,H=g.h;x.fillStyle='#333';x.strokeStyle='#ddd';x.font='11px sans-serif';"
    "x.textAlign='right';for(var j=0;j<=4;j++){var y=H-B-j*(H-B-TP)/4;x.beginPath();x.moveTo(L,y);x.lineTo(W-R,y);"
    "x.stroke();x.fillText(fmt(Math.round(max*j/4)),L-4,y+4);}x.textAlign='center';"
    "var st=Math.max(1,Math.ceil((v1-v0)/10));for(var s=Math.ceil(v0/st)*st;s<v1;s+=st)x.fillText(s,X(s+0.5),H-8);}\n"
    "function marks(g){var x=g.x,H=g.h;x.save();"
    "x.fillStyle='#0000000d';for(var s=Math.floor(v0);s<v1;s++)if(D.nodes[s]&&D.nodes[s][2])"
    "x.fillRect(X(s),TP,X(s+1)-X(s),H-B-TP);"
    "x.setLineDash([4,3]);x.strokeStyle='#555';[[D.n_fwd,'backward'],[D.n_bwd_end,'update'],[D.n_step,'evaluation']].forEach(function(m){"
    "if(m[0]>v0&&m[0]<v1){x.beginPath();x.moveTo(X(m[0]),TP);x.lineTo(X(m[0]),H-B);x.stroke();"
    "x.fillStyle='#555';x.textAlign='left';x.fillText(m[1]+' \\u2192',X(m[0])+3,TP+10);}});"
    "x.setLineDash([]);var p=X(D.peak_step+0.5);if(D.peak_step>=v0&&D.peak_step<v1){x.strokeStyle='#d00';x.lineWidth=1.5;"
    "x.beginPath();x.moveTo(p,TP);x.lineTo(p,H-B);x.stroke();x.fillStyle='#d00';x.textAlign='left';"
    "x.fillText('peak: step '+D.peak_step,p+3,TP+22);}x.restore();}\n"
    "function drawArena(){var g=AR,x=g.x,H=g.h,n=0;x.clearRect(0,0,W,H);axes(g,A);vis=[];"
    "var sy=(H-B-TP)/A;for(var i=0;i<T.length;i++){var t=T[i];if(t[1]<v0||t[0]>=v1)continue;"
    "var x0=Math.max(X(t[0]),L),x1=Math.min(X(t[1]+1),W-R),y1=H-B-t[2]*sy,y0=H-B-(t[2]+t[3])*sy,"
    "w=Math.max(1,x1-x0),h=Math.max(1,y1-y0);x.fillStyle=COL[t[4]];x.fillRect(x0,y0,w,h);"
    "if(RC[i]){x.strokeStyle='#000';x.lineWidth=1;x.setLineDash([3,2]);x.strokeRect(x0,y0,w,h);x.setLineDash([]);}"
    "else if(w>4&&h>4){x.strokeStyle='#fff';x.lineWidth=0.5;x.strokeRect(x0,y0,w,h);}"
    "rect[4*i]=x0;rect[4*i+1]=y0;rect[4*i+2]=w;rect[4*i+3]=h;vis.push(i);n++;}"
    "x.strokeStyle='#999';x.strokeRect(L,TP,W-L-R,H-B-TP);marks(g);return n;}\n"
    "function drawLive(){var g=LV,x=g.x,H=g.h,m=Math.max(top,1),sy=(H-B-TP)/m;x.clearRect(0,0,W,H);axes(g,m);"
    "for(var s=Math.floor(v0);s<v1;s++){var y=H-B,x0=X(s),w=Math.max(X(s+1)-x0,0.5);"
    "for(var k=0;k<NC;k++){var h=live[k][s]*sy;if(h<=0)continue;x.fillStyle=COL[k];x.fillRect(x0,y-h,w,h);y-=h;}}"
    "x.strokeStyle='#999';x.strokeRect(L,TP,W-L-R,H-B-TP);marks(g);}\n"
    "function draw(){var n=drawArena();drawLive();body.dataset.visible=n;return n;}\n"
    "body.dataset.drawn=draw();\n"
    "var tip=document.getElementById('tip'),info=document.getElementById('info');\n"
    "function describe(i){var t=T[i];return t[6]+'\\nlayer '+layer(t[5])+'\\n'+fmt(t[3])+' ('+t[3]+' bytes) at offset '+"
    "fmt(t[2])+'\\n'+D.cats[t[4]]+'\\nsteps '+t[0]+'\\u2013'+t[1]+' ('+(t[1]-t[0]+1)+' steps): from '+node(t[0])+"
    "' to '+node(t[1]);}\n"
    "function hit(e){var b=AR.c.getBoundingClientRect(),px=e.clientX-b.left,py=e.clientY-b.top;"
    "for(var j=vis.length-1;j>=0;j--){var i=vis[j],r=4*i;if(px>=rect[r]&&px<=rect[r]+rect[r+2]&&py>=rect[r+1]-1&&"
    "py<=rect[r+1]+rect[r+3]+1)return i;}return -1;}\n"
    "function show(e,text){if(!text){tip.style.display='none';return;}tip.textContent=text;tip.style.display='block';"
    "tip.style.left=Math.min(e.clientX+14,window.innerWidth-540)+'px';tip.style.top=(e.clientY+14)+'px';}\n"
    "AR.c.onmousemove=function(e){var i=hit(e);show(e,i>=0?describe(i):'');};\n"
    "AR.c.onmouseleave=LV.c.onmouseleave=function(){tip.style.display='none';};\n"
    "AR.c.onclick=function(e){var i=hit(e);info.textContent=i>=0?describe(i):'';};\n"
    "function stepAt(e,c){var b=c.getBoundingClientRect();return Math.floor(v0+(e.clientX-b.left-L)*(v1-v0)/(W-L-R));}\n"
    "LV.c.onmousemove=function(e){var s=stepAt(e,LV.c);if(s<v0||s>=v1||s>=S){show(e,'');return;}"
    "var a='step '+s+': '+node(s),h=0;for(var k=NC-1;k>=0;k--)if(live[k][s]){a+='\\n'+D.cats[k]+' '+fmt(live[k][s]);"
    "h+=live[k][s];}show(e,a+'\\nlive '+fmt(h));};\n"
    "function zoom(e){e.preventDefault();var c=e.currentTarget,b=c.getBoundingClientRect(),"
    "f=Math.min(Math.max((e.clientX-b.left-L)/(W-L-R),0),1),at=v0+f*(v1-v0),"
    "span=Math.min(S,Math.max(4,(v1-v0)*(e.deltaY<0?0.8:1.25)));v0=Math.max(0,at-f*span);v1=Math.min(S,v0+span);"
    "v0=Math.max(0,v1-span);draw();}\n"
    "AR.c.onwheel=LV.c.onwheel=zoom;\n"
    "AR.c.ondblclick=LV.c.ondblclick=function(){v0=0;v1=S;draw();};\n"
    "body.dataset.renderMs=Math.round(performance.now());\n"
    "})();\n"
    "</script>\n";

/* Persistent state, as plan.c tells it: such a group holds its root's bytes,
 * any other its largest member's (build_report's category sums; test_html
 * checks that the page's entries add up to them). */
static bool persistent_kind(hr_tensor_kind k) {
    return k == HR_T_PARAM || k == HR_T_BUFFER || k == HR_T_OPTSTATE;
}

static void write_data(FILE *f, const hr_session_t *s, const int *next) {
    const hr_program *p = &s->prog;
    const hr_graph *g = &p->g;
    const hr_plan *pl = &s->plan;
    const hr_report_t *r = &pl->report;
    const hr_config_t *c = &p->cfg;
    int op_index[HR_OP_COUNT], nops = 0;
    for (int k = 0; k < HR_OP_COUNT; k++) op_index[k] = -1;
    fputs("{\"model\":", f);
    js_str(f, s->model_name);
    fprintf(f, ",\"batch\":%lld,\"micro\":%lld,\"accumulate\":%d,\"steps\":%d,\"n_fwd\":%d,\"n_bwd_end\":%d,"
               "\"n_step\":%d,\"arena\":%zu,\"lower_bound\":%zu,\"device_total\":%zu,\"peak_step\":%d,\"recompute\":",
            (long long)c->batch, (long long)hr_micro_batch(c), c->accumulate > 1 ? c->accumulate : 1, g->nn, p->n_fwd,
            p->n_bwd_end, p->n_step, pl->arena_bytes, pl->lower_bound, r->device_total, pl->peak_step);
    js_str(f, r->recompute ? r->recompute : "");
    fputs(",\"cats\":[", f);
    for (int k = 0; k < HR_CAT_COUNT; k++) {
        if (k) fputc(',', f);
        js_str(f, hr_category_name((hr_category)k));
    }
    fputs("],\"colours\":[", f);
    for (int k = 0; k < HR_CAT_COUNT; k++) fprintf(f, "%s\"%s\"", k ? "," : "", cat_colour[k]);
    fputs("],\"cat_bytes\":[", f);
    for (int k = 0; k < HR_CAT_COUNT; k++) fprintf(f, "%s%zu", k ? "," : "", r->category_bytes[k]);
    fputs("],\"cat_peak\":[", f);
    for (int k = 0; k < HR_CAT_COUNT; k++) fprintf(f, "%s%zu", k ? "," : "", r->category_at_peak[k]);
    fputs("],\"nodes\":[", f);
    for (int k = 0; k < g->nn; k++) {
        const hr_node *n = &g->n[k];
        int o = (unsigned)n->op < HR_OP_COUNT ? (int)n->op : 0;
        if (op_index[o] < 0) op_index[o] = nops++;
        fprintf(f, "%s[%d,%d,%d]", k ? "," : "", op_index[o], n->layer, n->a.recompute ? 1 : 0);
    }
    fputs("],\"ops\":[", f);
    for (int i = 0; i < nops; i++)
        for (int k = 0; k < HR_OP_COUNT; k++)
            if (op_index[k] == i) {
                if (i) fputc(',', f);
                js_str(f, hr_op_name((hr_op)k));
            }
    fputs("],\"layers\":[", f);
    for (int l = 0; l < g->nl; l++) {
        fputs(l ? ",[" : "[", f);
        js_str(f, g->l[l].name ? g->l[l].name : "");
        fputc(',', f);
        js_str(f, g->l[l].type ? g->l[l].type : "");
        fputc(']', f);
    }
    /* one entry a group: [first, last, offset, bytes, category, layer, names] */
    fputs("],\"t\":[", f);
    bool any = false;
    for (int i = 0; i < g->nt; i++) {
        if (pl->root[i] != i) continue;
        const hr_tensor *t = &g->t[i];
        size_t held = t->bytes; /* as build_report's held[] */
        if (!persistent_kind(t->kind))
            for (int j = next[i]; j >= 0; j = next[j])
                if (g->t[j].bytes > held) held = g->t[j].bytes;
        fprintf(f, "%s[%d,%d,%zu,%zu,%d,%d,", any ? "," : "", t->first, t->last, t->offset, held, (int)t->cat,
                t->layer);
        any = true;
        /* the names of all members, the root's first */
        fputc('"', f);
        for (int j = i; j >= 0; j = next[j]) {
            if (j != i) fputs(", ", f);
            js_chars(f, g->t[j].name ? g->t[j].name : "?");
        }
        fputs("\"]", f);
    }
    fputs("]}", f);
}

static void write_page(FILE *f, const hr_session_t *s, const int *next, int groups) {
    const hr_program *p = &s->prog;
    const hr_report_t *r = &s->plan.report;
    const hr_config_t *c = &p->cfg;
    char a[32], b[32], d[32];
    int K = c->accumulate > 1 ? c->accumulate : 1;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>headroom plan: ", f);
    html_text(f, s->model_name);
    fputs("</title>\n", f);
    fputs(page_style, f);
    fputs("</head><body>\n<h1>", f);
    html_text(f, s->model_name);
    fprintf(f, ": one step's memory</h1>\n<p>batch %lld, %s, %s, %s on %s &mdash; %d tensors in %d groups, %d steps</p>\n",
            (long long)c->batch, c->mode == HR_MODE_TRAIN ? "train" : "inference",
            c->mode != HR_MODE_TRAIN             ? "no optimizer"
            : c->optim.kind == HR_OPTIM_SGD      ? "SGD"
            : c->optim.kind == HR_OPTIM_ADAM     ? "Adam"
                                                 : "AdamW",
            hr_precision_name(c->precision), s->be->name, r->n_tensors, groups, r->n_steps);
    fprintf(f, "<p>arena <b>%s</b> (lower bound %s, %.3fx); device total %s; peak at step %d of %d: ",
            hr_format_bytes(r->arena_bytes, a, sizeof a), hr_format_bytes(r->lower_bound, b, sizeof b),
            r->lower_bound ? (double)r->arena_bytes / (double)r->lower_bound : 1.0,
            hr_format_bytes(r->device_total, d, sizeof d), r->peak_step, r->n_steps);
    html_text(f, r->peak_op ? r->peak_op : "");
    fputs("</p>\n", f);
    if (K > 1)
        fprintf(f, "<p class=note>Accumulation: %d micro-batches of %lld samples a step; the picture is one "
                   "micro-batch's pass, run %d times, and the gradients are held the whole step.</p>\n",
                K, (long long)hr_micro_batch(c), K);
    if (r->recompute) {
        size_t saved = r->arena_no_recompute > r->arena_bytes ? r->arena_no_recompute - r->arena_bytes : 0;
        fputs("<p class=note>Recomputation: layers ", f);
        html_text(f, r->recompute);
        fprintf(f, "; %d forward nodes run again in the backward pass (shaded steps; their tensors end in "
                   "&ldquo;.recomputed&rdquo; and are outlined in dashes); the arena is %s smaller than keeping everything (%s).</p>\n",
                r->recompute_nodes, hr_format_bytes(saved, a, sizeof a),
                hr_format_bytes(r->arena_no_recompute, b, sizeof b));
    }
    fputs("<p>The arena over the schedule: steps across, byte offsets up; each rectangle is one block of storage "
          "(a tensor, or the tensors that share it) from its first step to its last. Hover or click for details; "
          "the wheel zooms the steps, a double click resets.</p>\n<div id=legend></div>\n"
          "<canvas id=arena></canvas>\n<p>Live bytes by category at each step:</p>\n<canvas id=live></canvas>\n"
          "<div id=info></div>\n<table><tr><th>category</th><th>total</th><th>live at peak</th></tr>\n",
          f);
    for (int k = 0; k < HR_CAT_COUNT; k++) {
        if (k == HR_CAT_WCOPY && c->precision == HR_PREC_FP32) continue;
        fprintf(f, "<tr><td><i class=sw style=\"background:%s\"></i>%s</td><td>%s</td><td>%s</td></tr>\n",
                cat_colour[k], hr_category_name((hr_category)k),
                hr_format_bytes(r->category_bytes[k], a, sizeof a), hr_format_bytes(r->category_at_peak[k], b, sizeof b));
    }
    fprintf(f, "<tr><td>arena (peak)</td><td>%s</td><td></td></tr>\n", hr_format_bytes(r->arena_bytes, a, sizeof a));
    fprintf(f, "<tr><td>lower bound</td><td>%s</td><td></td></tr>\n", hr_format_bytes(r->lower_bound, a, sizeof a));
    fprintf(f, "<tr><td>device total</td><td>%s</td><td></td></tr>\n</table>\n<div id=tip></div>\n",
            hr_format_bytes(r->device_total, a, sizeof a));
    fputs("<script type=\"application/json\" id=\"plan-data\">", f);
    write_data(f, s, next);
    fputs("</script>\n", f);
    fputs(page_script, f);
    fputs("</body></html>\n", f);
}

hr_status hr_plan_html(const hr_session_t *s, const char *path) {
    const hr_graph *g = &s->prog.g;
    const hr_plan *pl = &s->plan;
    struct stat sb;
    if (!path || !path[0]) return hr_error_set(HR_ERR_IO, "--html: no file name given");
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hr_error_set(HR_ERR_IO, "cannot write %s: it is a directory; give a file name, e.g. %s/memory.html", path,
                            path);
    /* members of each group, the root first: next[root] -> the others, in order */
    int *next = hr_malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1)), *tail = hr_malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    size_t plen = strlen(path);
    char *tmp = hr_malloc(plen + 8);
    if (!next || !tail || !tmp) {
        hr_free(next);
        hr_free(tail);
        hr_free(tmp);
        return hr_error_set(HR_ERR_OOM, "out of host memory writing %s", path);
    }
    int groups = 0;
    for (int i = 0; i < g->nt; i++) next[i] = -1, tail[i] = i;
    for (int i = 0; i < g->nt; i++) {
        int r = pl->root[i];
        if (r < 0) continue;
        if (r == i) {
            groups++;
            continue;
        }
        next[tail[r]] = i;
        tail[r] = i;
    }
    hr_free(tail);
    /* a temporary file beside it, renamed over it once complete */
    hr_status st = HR_OK;
    FILE *f = hr_file_begin(path, tmp, plen + 8);
    if (!f) {
        st = hr_last_status();
        goto done;
    }
    write_page(f, s, next, groups);
    st = hr_file_commit(f, tmp, path);
done:
    hr_free(next);
    hr_free(tmp);
    return st;
}
