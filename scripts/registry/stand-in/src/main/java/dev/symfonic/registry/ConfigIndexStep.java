package dev.symfonic.registry;

import apicurio.common.app.components.config.index.DynamicPropertiesInfoRecorder;
import io.apicurio.common.apps.config.Dynamic;
import io.apicurio.common.apps.config.DynamicConfigPropertyDef;
import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import io.quarkus.arc.deployment.BeanDiscoveryFinishedBuildItem;
import io.quarkus.arc.deployment.SyntheticBeanBuildItem;
import io.quarkus.arc.processor.InjectionPointInfo;
import io.quarkus.deployment.annotations.BuildProducer;
import io.quarkus.deployment.annotations.BuildStep;
import io.quarkus.deployment.annotations.ExecutionTime;
import io.quarkus.deployment.annotations.Record;
import java.util.ArrayList;
import java.util.List;
import org.eclipse.microprofile.config.inject.ConfigProperty;
import org.jboss.jandex.AnnotationInstance;
import org.jboss.jandex.AnnotationValue;
import org.jboss.jandex.DotName;

/**
 * The registry's dynamic configuration properties (fields injected with both
 * {@code @ConfigProperty} and {@code @Dynamic}) as one synthetic
 * {@link DynamicConfigPropertyList} bean: the one thing the unpublished deployment artifact of
 * apicurio-common-app-components-config-index does that the registry needs to start.
 */
public class ConfigIndexStep {

    private static final DotName CONFIG_PROPERTY = DotName.createSimple(ConfigProperty.class.getName());
    private static final DotName DYNAMIC = DotName.createSimple(Dynamic.class.getName());

    @BuildStep
    @Record(ExecutionTime.RUNTIME_INIT)
    void declare(DynamicPropertiesInfoRecorder recorder, BeanDiscoveryFinishedBuildItem discovery,
                 BuildProducer<SyntheticBeanBuildItem> beans) throws ClassNotFoundException {
        List<DynamicConfigPropertyDef> found = new ArrayList<>();
        for (InjectionPointInfo point : discovery.getInjectionPoints()) {
            AnnotationInstance property = point.getRequiredQualifier(CONFIG_PROPERTY);
            if (property == null || !point.isField()) {
                continue;
            }
            AnnotationInstance dynamic = point.getTarget().asField().annotation(DYNAMIC);
            if (dynamic == null) {
                continue;
            }
            String name = property.value("name").asString();
            AnnotationValue fallback = property.value("defaultValue");
            if (fallback == null) {
                throw new IllegalStateException("dynamic property " + name + " has no default value");
            }
            // Supplier<T>: the property's type is T.
            String type = point.getRequiredType().asParameterizedType().arguments().get(0).name().toString();
            DynamicConfigPropertyDef def = new DynamicConfigPropertyDef(name,
                    Class.forName(type, false, Thread.currentThread().getContextClassLoader()),
                    fallback.asString());
            AnnotationValue label = dynamic.value("label");
            AnnotationValue description = dynamic.value("description");
            AnnotationValue requires = dynamic.value("requires");
            if (label != null) {
                def.setLabel(label.asString());
            }
            if (description != null) {
                def.setDescription(description.asString());
            }
            if (requires != null) {
                def.setRequires(requires.asStringArray());
            }
            found.add(def);
        }
        beans.produce(SyntheticBeanBuildItem.configure(DynamicConfigPropertyList.class)
                .runtimeValue(recorder.initializePropertiesInfo(found))
                .unremovable()
                .setRuntimeInit()
                .done());
    }
}
