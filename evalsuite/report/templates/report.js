// Sorting and paging for the evalsuite report. It only reorders and hides elements that are already in
// the page (never builds HTML from strings), so no model output can become markup here.
(function () {
  "use strict";

  function cellValue(row, idx, numeric) {
    var cell = row.children[idx];
    var v = cell ? cell.getAttribute("data-v") : "";
    if (!numeric) { return (v === null ? (cell ? cell.textContent : "") : v).toLowerCase(); }
    var x = parseFloat(v);
    return isNaN(x) ? null : x;
  }

  function sortBy(table, th) {
    var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-type") === "num";
    var asc = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, idx, numeric), y = cellValue(b, idx, numeric);
      if (x === y) { return 0; }
      if (x === null || x === "") { return 1; }     // missing values stay at the bottom
      if (y === null || y === "") { return -1; }
      return (x < y ? -1 : 1) * (asc ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
  });

  var pager = document.querySelector(".pager");
  if (pager) {
    var pages = document.querySelectorAll(".page");
    var current = 0;
    var show = function (k) {
      current = Math.max(0, Math.min(pages.length - 1, k));
      pages.forEach(function (p, i) { p.hidden = i !== current; });
      pager.querySelector(".pageno").textContent = String(current + 1);
      pager.querySelector('[data-step="-1"]').disabled = current === 0;
      pager.querySelector('[data-step="1"]').disabled = current === pages.length - 1;
    };
    pager.querySelectorAll("button").forEach(function (b) {
      b.addEventListener("click", function () {
        show(current + parseInt(b.getAttribute("data-step"), 10));
        document.getElementById("samples").scrollIntoView();
      });
    });
    show(0);
  }
  document.documentElement.setAttribute("data-js-ready", "1");
})();
