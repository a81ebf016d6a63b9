/*
 * jsPsych 8 plugin "rate-categories": one image (attention checks are images too, with their
 * instruction drawn in) and a five-point rating for every category. Continue unlocks when every
 * category is rated. Records the ratings, the time of the first click (first_reaction_rt) and of
 * Continue (rt), in ms. Built with DOM calls and textContent, so no category name is ever parsed as
 * HTML, and with no inline style markup, so it runs under the server's Content-Security-Policy.
 */
var jsPsychRateCategories = (function (jspsych) {
  "use strict";

  const info = {
    name: "rate-categories",
    version: "0.1.0",
    parameters: {
      /** URL of the image. */
      image: { type: jspsych.ParameterType.IMAGE, default: undefined },
      /** Category names, one row each. */
      categories: { type: jspsych.ParameterType.STRING, array: true, default: undefined },
      /** Allowed ratings in percent. */
      levels: { type: jspsych.ParameterType.INT, array: true, default: [0, 25, 50, 75, 100] },
      /** Line above the image, e.g. "Image 3 of 120". */
      header: { type: jspsych.ParameterType.STRING, default: "" },
      /** The question above the rating grid. */
      question: { type: jspsych.ParameterType.STRING,
                  default: "How likely is it that the image shows each of these?" },
      /** Displayed image size in CSS pixels (fractional for a study sized in degrees: degrees x px/deg). */
      image_size: { type: jspsych.ParameterType.FLOAT, default: 224 },
      button_label: { type: jspsych.ParameterType.STRING, default: "Continue" },
    },
    data: {
      ratings: { type: jspsych.ParameterType.COMPLEX },
      rt: { type: jspsych.ParameterType.INT },
      first_reaction_rt: { type: jspsych.ParameterType.INT },
    },
  };

  function element(tag, attributes, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  class RateCategoriesPlugin {
    constructor(jsPsych) {
      this.jsPsych = jsPsych;
    }

    trial(display_element, trial) {
      const root = element("div", { class: "rating-trial" });
      if (trial.header) root.appendChild(element("div", { class: "rating-header" }, trial.header));
      const frame = element("div", { class: "rating-stimulus" });
      frame.style.width = `${trial.image_size}px`;
      frame.style.height = `${trial.image_size}px`;
      const image = element("img", { src: trial.image, alt: "image to rate", draggable: "false" });
      image.style.width = `${trial.image_size}px`;
      image.style.height = `${trial.image_size}px`;
      frame.appendChild(image);
      const body = element("div", { class: "rating-body" });
      body.appendChild(frame);
      root.appendChild(body);

      // more categories than MNIST's ten (e.g. the 16 ImageNet entry-level ones): denser rows, so the grid and
      // Continue fit the smallest window the study admits (800 x 600)
      const table = element("table", { class: trial.categories.length > 10 ? "rating-grid compact" : "rating-grid" });
      table.appendChild(element("caption", {}, trial.question));
      const head = element("tr");
      head.appendChild(element("th", {}, ""));
      for (const level of trial.levels) head.appendChild(element("th", {}, `${level}%`));
      table.appendChild(head);
      trial.categories.forEach((category, row) => {
        const tr = element("tr", { "data-category": category });
        tr.appendChild(element("th", { class: "category", scope: "row" }, category));
        for (const level of trial.levels) {
          const td = element("td");
          td.appendChild(element("input", { type: "radio", name: `rating-${row}`, value: String(level),
                                            "aria-label": `${category}: ${level}%` }));
          tr.appendChild(td);
        }
        table.appendChild(tr);
      });
      body.appendChild(table);
      const button = element("button", { class: "jspsych-btn rating-continue", type: "button" }, trial.button_label);
      button.disabled = true;
      root.appendChild(button);
      display_element.replaceChildren(root);

      const start = performance.now();
      let firstReaction = null;
      const ratings = {};
      table.addEventListener("change", (event) => {
        const input = event.target;
        if (firstReaction === null) firstReaction = performance.now() - start;
        const row = Number(input.name.slice("rating-".length));
        ratings[trial.categories[row]] = Number(input.value);
        input.closest("tr").classList.add("answered");
        button.disabled = Object.keys(ratings).length !== trial.categories.length;
      });
      button.addEventListener("click", () => {
        if (button.disabled) return;
        const rt = Math.round(performance.now() - start);
        const data = { ratings: { ...ratings }, rt, first_reaction_rt: Math.round(firstReaction) };
        display_element.replaceChildren();
        this.jsPsych.finishTrial(data);
      });
    }
  }
  RateCategoriesPlugin.info = info;
  return RateCategoriesPlugin;
})(jsPsychModule);
