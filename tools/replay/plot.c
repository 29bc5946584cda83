/*
 * plot.c — `run/compare --plot FILE.svg|FILE.png`: reserved and in-use bytes
 * over the trace's own time, each policy a colour and a dash pattern of its
 * own (reserved thick, in use thin; later policies drawn narrower on top so
 * lines that coincide both show), with a legend; a standalone SVG, or a PNG
 * rasterised from it by rsvg-convert (librsvg2-bin) when the path ends .png.
 *
 * Samples are taken after every batch fed to the simulators; when a series
 * is full, neighbouring points merge keeping the larger values, so a peak
 * between two kept points is never lost (the drawn peak is the true peak of
 * the samples). Entry points: plot_init, plot_add, plot_write_svg,
 * plot_free.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "replay_tool.h"

#define W 960
#define H 440
#define ML 80 /* left margin: the byte axis */
#define MR 20
#define MT 48 /* top: title and legend */
#define MB 44 /* bottom: the event axis */

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c",
                                      "#9467bd", "#ff7f0e", "#8c564b",
                                      "#e377c2", "#17becf"};
#define NCOLOURS (sizeof colours / sizeof colours[0])
static const char *const dashes[] = {"", "9 4", "3 3", "12 4 3 4", "6 2", "2 5"};
#define NDASHES (sizeof dashes / sizeof dashes[0])

bool plot_format_ok(const char *path) {
  size_t n = strlen(path);
  return n > 4 && (strcmp(path + n - 4, ".svg") == 0 || strcmp(path + n - 4, ".png") == 0);
}

int plot_init(tool_plot *p, size_t nseries) {
  memset(p, 0, sizeof *p);
  if (nseries == 0 || nseries > PLOT_MAX_SERIES)
    return AA_EINVAL;
  p->pts = calloc(nseries * PLOT_MAX_POINTS, sizeof *p->pts);
  if (p->pts == NULL)
    return AA_ENOMEM;
  p->nseries = nseries;
  p->stride = 1;
  return AA_OK;
}

void plot_free(tool_plot *p) {
  free(p->pts);
  memset(p, 0, sizeof *p);
}

/* Halves every series: point i becomes the larger of points 2i and 2i+1. */
static void plot_halve(tool_plot *p) {
  size_t s, i;
  for (s = 0; s < p->nseries; s++) {
    tool_plot_point *a = &p->pts[s * PLOT_MAX_POINTS];
    for (i = 0; i < p->npoints / 2; i++) {
      tool_plot_point x = a[2 * i], y = a[2 * i + 1];
      a[i].events = y.events;
      a[i].time_ns = y.time_ns;
      a[i].in_use = x.in_use > y.in_use ? x.in_use : y.in_use;
      a[i].reserved = x.reserved > y.reserved ? x.reserved : y.reserved;
    }
    if (p->npoints % 2 != 0)
      a[i] = a[p->npoints - 1];
  }
  p->npoints = (p->npoints + 1) / 2;
  p->stride *= 2;
}

void plot_add(tool_plot *p, const aa_replay_now *now, uint64_t time_ns) {
  size_t s;
  if (p->pts == NULL)
    return;
  /* every stride-th call opens a point; the calls in between fold into it */
  if (p->pending == 0) {
    if (p->npoints == PLOT_MAX_POINTS)
      plot_halve(p);
    for (s = 0; s < p->nseries; s++)
      memset(&p->pts[s * PLOT_MAX_POINTS + p->npoints], 0, sizeof *p->pts);
    p->npoints++;
  }
  p->pending = (p->pending + 1) % p->stride;
  for (s = 0; s < p->nseries; s++) {
    tool_plot_point *pt = &p->pts[s * PLOT_MAX_POINTS + p->npoints - 1];
    pt->events = now[s].events;
    pt->time_ns = time_ns;
    if (now[s].in_use > pt->in_use)
      pt->in_use = now[s].in_use;
    if (now[s].reserved > pt->reserved)
      pt->reserved = now[s].reserved;
  }
}

/* XML text: & < > " escaped, control bytes dropped. */
static void put_text(FILE *f, const char *s) {
  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '&')
      fputs("&amp;", f);
    else if (c == '<')
      fputs("&lt;", f);
    else if (c == '>')
      fputs("&gt;", f);
    else if (c == '"')
      fputs("&quot;", f);
    else if (c >= 0x20 && c != 0x7F)
      fputc(c, f);
  }
}

/* A "nice" step (1, 2 or 5 times a power of 1024 or 10) for about n ticks. */
static double nice_step(double max, int n, bool binary) {
  double raw = max / n, base = 1, m;
  if (!(raw > 0))
    return 1;
  if (binary) {
    while (base * 1024 <= raw)
      base *= 1024;
  }
  while (base * 10 <= raw)
    base *= 10;
  m = raw / base;
  return base * (m <= 1 ? 1 : m <= 2 ? 2
                          : m <= 5   ? 5
                                     : 10);
}

static void put_dash(FILE *f, size_t s) {
  if (dashes[s % NDASHES][0] != '\0')
    fprintf(f, " stroke-dasharray=\"%s\"", dashes[s % NDASHES]);
}

static void svg_to(FILE *f, const tool_plot *p, const char *title,
                   const char *const *labels) {
  uint64_t ymax = 1, xmax = 1, t0 = UINT64_MAX;
  double ystep, xstep, v;
  size_t s, i;
  const double pw = W - ML - MR, ph = H - MT - MB;
  char buf[64];

  for (s = 0; s < p->nseries; s++) {
    for (i = 0; i < p->npoints; i++) {
      const tool_plot_point *pt = &p->pts[s * PLOT_MAX_POINTS + i];
      if (pt->reserved > ymax)
        ymax = pt->reserved;
      if (pt->in_use > ymax)
        ymax = pt->in_use;
      if (pt->time_ns < t0)
        t0 = pt->time_ns;
    }
  }
  if (t0 == UINT64_MAX)
    t0 = 0;
  for (s = 0; s < p->nseries; s++)
    for (i = 0; i < p->npoints; i++)
      if (p->pts[s * PLOT_MAX_POINTS + i].time_ns - t0 > xmax)
        xmax = p->pts[s * PLOT_MAX_POINTS + i].time_ns - t0;
  ystep = nice_step((double)ymax, 5, true);
  xstep = nice_step((double)xmax, 8, false);
  ymax = (uint64_t)(ceil((double)ymax / ystep) * ystep);

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
          W, H, W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
  fputs("<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", f);
  put_text(f, title);
  fputs("</text>\n", f);
  /* grid and axes */
  fputs("<g stroke=\"#dddddd\" stroke-width=\"1\">\n", f);
  for (v = 0; v <= (double)ymax + 0.5; v += ystep) {
    double y = MT + ph - v / (double)ymax * ph;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", ML, y,
            W - MR, y);
  }
  for (v = 0; v <= (double)xmax; v += xstep) {
    double x = ML + v / (double)xmax * pw;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, MT,
            x, H - MB);
  }
  fputs("</g>\n<g fill=\"#444444\">\n", f);
  for (v = 0; v <= (double)ymax + 0.5; v += ystep) {
    double y = MT + ph - v / (double)ymax * ph;
    fmt_bytes((uint64_t)v, buf, sizeof buf);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            ML - 6, y + 4, buf);
  }
  for (v = 0; v <= (double)xmax; v += xstep) {
    double x = ML + v / (double)xmax * pw;
    snprintf(buf, sizeof buf, "%.6g", v / 1e9);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            x, H - MB + 16, buf);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">trace time "
             "(s)</text>\n</g>\n",
          ML + pw / 2, H - 8);
  /* one polyline per series and figure: the policy's colour and dash;
   * reserved thick, in use thin; later series narrower, on top */
  for (s = 0; s < p->nseries; s++) {
    const char *col = colours[s % NCOLOURS];
    double shrink = (double)s * 0.5;
    int kind;
    for (kind = 0; kind < 2; kind++) {
      double w = kind == 0 ? 3.5 - shrink : 2.0 - shrink / 2;
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.2f\"", col,
              w < 0.8 ? 0.8 : w);
      put_dash(f, s);
      fputs(" points=\"", f);
      for (i = 0; i < p->npoints; i++) {
        const tool_plot_point *pt = &p->pts[s * PLOT_MAX_POINTS + i];
        uint64_t b = kind == 0 ? pt->reserved : pt->in_use;
        fprintf(f, "%s%.1f,%.1f", i > 0 ? " " : "",
                ML + (double)(pt->time_ns - t0) / (double)xmax * pw,
                MT + ph - (double)b / (double)ymax * ph);
      }
      fputs("\"/>\n", f);
    }
  }
  /* legend: each policy's colour and dash, then the two widths */
  {
    double x = 10;
    for (s = 0; s < p->nseries; s++) {
      fprintf(f, "<line x1=\"%.0f\" y1=\"34\" x2=\"%.0f\" y2=\"34\" stroke=\"%s\" "
                 "stroke-width=\"2.5\"",
              x, x + 28, colours[s % NCOLOURS]);
      put_dash(f, s);
      fprintf(f, "/><text x=\"%.0f\" y=\"38\">", x + 32);
      put_text(f, labels[s]);
      fputs("</text>\n", f);
      x += 32 + 7.0 * (double)strlen(labels[s]) + 18;
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"34\" x2=\"%.0f\" y2=\"34\" stroke=\"#444\" "
               "stroke-width=\"3.5\"/><text x=\"%.0f\" y=\"38\">reserved</text>\n",
            x, x + 24, x + 28);
    x += 90;
    fprintf(f, "<line x1=\"%.0f\" y1=\"34\" x2=\"%.0f\" y2=\"34\" stroke=\"#444\" "
               "stroke-width=\"1.5\"/><text x=\"%.0f\" y=\"38\">in use</text>\n",
            x, x + 24, x + 28);
  }
  fputs("</svg>\n", f);
}

/* rsvg-convert -f png -o png svg; 0, 127 when it is not installed, or its
 * status. */
static int rasterise(const char *svg, const char *png) {
  pid_t pid = fork();
  int st;

  if (pid < 0)
    return -1;
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      close(devnull);
    }
    execlp("rsvg-convert", "rsvg-convert", "-f", "png", "-o", png, svg, (char *)NULL);
    _exit(127);
  }
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int plot_write(const tool_plot *p, const char *path, const char *title,
               const char *const *labels, char *err, size_t errcap) {
  size_t n = strlen(path);
  bool png = n > 4 && strcmp(path + n - 4, ".png") == 0;
  aa__outfile svg, out;
  char e2[PATH_MAX + 200];
  int rc;

  /* the SVG: the output itself, or for a PNG a temporary beside it */
  if (aa__out_open(&out, path, 0666, e2, sizeof e2) != AA_OK) {
    snprintf(err, errcap, "%s: cannot write the plot: %s", path, e2);
    return AA_EIO;
  }
  if (!png) {
    svg_to(out.f, p, title, labels);
    if (aa__out_commit(&out, e2, sizeof e2) != AA_OK) {
      snprintf(err, errcap, "%s: cannot write the plot: %s", path, e2);
      return AA_EIO;
    }
    return AA_OK;
  }
  if (out.tmp[0] == '\0') {
    aa__out_abort(&out);
    snprintf(err, errcap, "%s: a PNG plot goes to a regular file", path);
    return AA_EINVAL;
  }
  {
    char svgpath[PATH_MAX + 8];
    snprintf(svgpath, sizeof svgpath, "%s.svg", out.tmp);
    if (aa__out_open(&svg, svgpath, 0600, e2, sizeof e2) != AA_OK) {
      aa__out_abort(&out);
      snprintf(err, errcap, "%s: cannot write the plot: %s", path, e2);
      return AA_EIO;
    }
    svg_to(svg.f, p, title, labels);
    if (aa__out_commit(&svg, e2, sizeof e2) != AA_OK) {
      aa__out_abort(&out);
      snprintf(err, errcap, "%s: cannot write the plot: %s", path, e2);
      return AA_EIO;
    }
    fclose(out.f);
    out.f = NULL;
    rc = rasterise(svgpath, out.tmp);
    unlink(svgpath);
  }
  if (rc != 0) {
    aa__out_abort(&out);
    if (rc == 127)
      snprintf(err, errcap, "%s: cannot write a PNG: rsvg-convert (Debian package "
                            "librsvg2-bin) is not installed; ask for an SVG (--plot FILE.svg)",
               path);
    else
      snprintf(err, errcap, "%s: rsvg-convert failed (status %d); --plot FILE.svg writes the SVG",
               path, rc);
    return AA_EIO;
  }
  if (aa__out_commit(&out, e2, sizeof e2) != AA_OK) {
    snprintf(err, errcap, "%s: cannot write the plot: %s", path, e2);
    return AA_EIO;
  }
  return AA_OK;
}
